"""Celery tasks for fleet."""

import socket

from celery import shared_task
from django.utils import timezone

from fleet import kube, services
from fleet.models import Cluster, WorkerHeartbeat


@shared_task(name="fleet.heartbeat", ignore_result=True)
def heartbeat(nonce: str = "") -> None:
    """Record that a worker is alive (beat runs it every minute; tests use the nonce)."""
    WorkerHeartbeat.objects.update_or_create(
        hostname=socket.gethostname(), defaults={"seen_at": timezone.now(), "nonce": nonce}
    )


@shared_task(
    name="fleet.sync_inventory",
    bind=True,
    ignore_result=True,
    acks_late=True,
    max_retries=3,
)
def sync_inventory(self, cluster_id: int | None = None) -> None:
    """Sync one cluster's nodes and GPU allocation (or every cluster when no id is given)."""
    if cluster_id is None:
        for pk in Cluster.objects.values_list("pk", flat=True):
            sync_inventory.delay(pk)
        return
    cluster = Cluster.objects.filter(pk=cluster_id).first()
    if cluster is None:
        return
    try:
        services.cluster_sync_inventory(cluster=cluster)
    except kube.TransientError as exc:
        # The error is stored on the cluster already; the next beat tick tries again anyway.
        raise self.retry(exc=exc, countdown=min(60, 5 * 2**self.request.retries)) from exc
