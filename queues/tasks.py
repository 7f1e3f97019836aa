"""Celery tasks for governance: reconcile clusters, apply objects, drift checks, burst expiry.

Each task takes ids, re-reads the rows and is safe to run twice (acks_late): applies are
server-side applies of the stored manifest, guarded by generations.
"""

import logging

from celery import shared_task

from fleet import kube
from fleet.models import Cluster
from queues.services import governance, reconcile

logger = logging.getLogger(__name__)

# A few quick retries cover a blip; a longer outage is covered by the beat's reconcile_all
# every minute, so retries never pile up while a cluster is down.
RETRY = {
    "autoretry_for": (kube.TransientError,),
    "retry_backoff": 2,
    "retry_backoff_max": 60,
    "retry_jitter": True,
    "max_retries": 5,
}


@shared_task(name="queues.reconcile_cluster", acks_late=True, ignore_result=True, **RETRY)
def reconcile_cluster(cluster_id: int) -> dict | None:
    """Render the cluster's desired state and apply whatever lags."""
    if not Cluster.objects.filter(pk=cluster_id).exists():
        return None
    return reconcile.cluster_reconcile(cluster_id=cluster_id)


@shared_task(name="queues.apply_managed_object", acks_late=True, ignore_result=True, **RETRY)
def apply_managed_object(object_id: int) -> str:
    """Apply (or delete) one managed object if its applied generation lags."""
    return reconcile.managed_object_apply(object_id=object_id)


@shared_task(name="queues.reconcile_all", acks_late=True, ignore_result=True)
def reconcile_all() -> None:
    """Beat: reconcile every cluster, and re-enqueue objects whose apply was lost."""
    for cluster_id in Cluster.objects.values_list("pk", flat=True):
        reconcile_cluster.delay(cluster_id)
    for object_id in reconcile.managed_objects_lagging():
        apply_managed_object.delay(object_id)


@shared_task(name="queues.check_drift", acks_late=True, ignore_result=True)
def check_drift(cluster_id: int | None = None) -> None:
    """Beat: re-read applied objects and restore the ones edited or deleted in the cluster."""
    ids = [cluster_id] if cluster_id else list(Cluster.objects.values_list("pk", flat=True))
    for pk in ids:
        try:
            drifted = reconcile.cluster_check_drift(cluster_id=pk)["drifted"]
        except kube.KubeError as exc:
            # Unreachable or misconfigured now; the next run looks again.
            logger.warning("drift check of cluster %s skipped: %s", pk, exc)
            continue
        if drifted:
            reconcile_cluster.delay(pk)


@shared_task(name="queues.expire_burst_grants", acks_late=True, ignore_result=True)
def expire_burst_grants() -> list[int]:
    """Beat: revert burst grants whose end date has passed."""
    return governance.quota_bursts_expire()
