"""Celery tasks of queues: reconcile the quota objects into clusters, apply and sync jobs, and
notifications. Each takes ids, re-reads the rows and is safe to run twice where it is acks_late
(applies are server-side applies guarded by generations)."""

import logging

from celery import shared_task

from fleet import kube
from fleet.models import Cluster
from queues.services import job_apply, job_sync, notifications, quotas, reconcile

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
    try:
        return reconcile.cluster_reconcile(cluster_id=cluster_id)
    finally:
        # What reached the cluster settles the quota requests waiting for it, errors included.
        quotas.quota_requests_settle(cluster_id=cluster_id)


@shared_task(name="queues.apply_managed_object", acks_late=True, ignore_result=True, **RETRY)
def apply_managed_object(object_id: int) -> str:
    """Apply (or delete) one managed object if its applied generation lags."""
    cluster_id = reconcile.managed_object_cluster_id(object_id=object_id)
    try:
        return reconcile.managed_object_apply(object_id=object_id)
    finally:
        if cluster_id is not None:
            quotas.quota_requests_settle(cluster_id=cluster_id)


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
    return quotas.quota_bursts_expire()


def _backoff(retries: int) -> float:
    return min(60.0, 0.5 * 2**retries)


@shared_task(name="queues.apply_jobs", bind=True, ignore_result=True, acks_late=True, max_retries=8)
def apply_jobs(self, cluster_id: int) -> dict:
    """Create the cluster's submitted jobs' objects (idempotent: claims, generations and
    server-side apply by deterministic name)."""
    try:
        return job_apply.jobs_apply_ready(cluster_id=cluster_id)
    except kube.TransientError as exc:
        if self.request.retries >= self.max_retries:
            # The periodic sync asks again for jobs left behind; they stay submitted meanwhile.
            logger.warning("cluster %s: giving up applying jobs for now: %s", cluster_id, exc)
            return {"deferred": 1}
        raise self.retry(exc=exc, countdown=_backoff(self.request.retries)) from exc


@shared_task(name="queues.delete_job", bind=True, ignore_result=True, acks_late=True, max_retries=8)
def delete_job(self, job_id: int) -> int:
    """Delete a cancelled job's objects (pods go with them, in the background)."""
    try:
        return job_apply.job_delete_objects(job_id=job_id)
    except kube.TransientError as exc:
        raise self.retry(exc=exc, countdown=_backoff(self.request.retries)) from exc


@shared_task(name="queues.sync_jobs", ignore_result=True)
def sync_jobs() -> dict:
    """Periodic: observed status of every active job; re-send applies that were lost."""
    for cluster_id, job_ids in job_apply.jobs_reapply_lost().items():
        if cluster_id is not None:
            apply_jobs.delay(cluster_id)
        else:  # no cluster to apply to: job_apply records why they failed, without I/O
            for job_id in job_ids:
                job_apply.job_apply(job_id=job_id)
    return job_sync.jobs_sync_all()


@shared_task(name="queues.notify_job", ignore_result=True)
def notify_job(job_id: int, state: str) -> None:
    """Tell the owner and the team's webhook about a state change (one task per channel)."""
    notifications.job_notify(job_id=job_id, state=state)


@shared_task(name="queues.send_email", bind=True, ignore_result=True, max_retries=5)
def send_email(self, recipients: list[str], subject: str, body: str) -> None:
    """Send one e-mail; a mail server that is down is tried again with backoff."""
    try:
        notifications.email_send(recipients=recipients, subject=subject, body=body)
    except notifications.NotifyError as exc:
        raise self.retry(exc=exc, countdown=_backoff(self.request.retries) * 10) from exc


@shared_task(name="queues.post_webhook", bind=True, ignore_result=True, max_retries=5)
def post_webhook(self, url: str, text: str) -> None:
    """Post one message to a team webhook; a webhook that is down is tried again with backoff."""
    try:
        notifications.webhook_post(url=url, text=text)
    except notifications.NotifyError as exc:
        raise self.retry(exc=exc, countdown=_backoff(self.request.retries) * 10) from exc
