"""Celery tasks of fleet: the inventory sync of each cluster."""

from core.worker import task
from fleet import kube
from fleet.models import Cluster
from fleet.services.cluster_health import cluster_may_call
from fleet.services.inventory import cluster_sync_inventory


# The error is stored on the cluster already; the next beat tick tries again anyway.
@task(name="fleet.sync_inventory", transient=(kube.TransientError,), acks_late=True, max_retries=3)
def sync_inventory(cluster_id: int | None = None) -> None:
    """Sync one cluster's nodes and GPU allocation (or every cluster when no id is given)."""
    if cluster_id is None:
        for pk in Cluster.objects.filter(enabled=True).values_list("pk", flat=True):
            sync_inventory.delay(pk)
        return
    cluster = Cluster.objects.filter(pk=cluster_id, enabled=True).first()
    if cluster is None or not cluster_may_call(cluster=cluster):
        return
    cluster_sync_inventory(cluster=cluster)
