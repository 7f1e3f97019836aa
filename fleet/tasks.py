"""Celery tasks of fleet: the worker heartbeat and the inventory sync of each cluster."""

import socket

from django.utils import timezone

from config.celery import send_unsent as send_kept
from config.celery import task
from fleet import kube
from fleet.models import Cluster, WorkerHeartbeat
from fleet.services.cluster_health import cluster_may_call
from fleet.services.inventory import cluster_sync_inventory


@task(name="fleet.heartbeat")
def heartbeat(nonce: str = "") -> None:
    """Record that a worker is alive (beat runs it every minute; tests use the nonce)."""
    WorkerHeartbeat.objects.update_or_create(
        hostname=socket.gethostname(), defaults={"seen_at": timezone.now(), "nonce": nonce}
    )


@task(name="fleet.send_unsent")
def send_unsent() -> int:
    """Beat: send the messages kept while the broker was down."""
    return send_kept()


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
