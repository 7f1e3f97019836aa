"""Celery tasks of queues: reconcile the quota objects into clusters, apply and sync jobs, and
notifications. Each takes ids, re-reads the rows and is safe to run twice where it is acks_late
(applies are server-side applies guarded by generations)."""

import logging

from core.worker import current_run_id, task
from fleet import kube
from fleet.models import Cluster
from fleet.services.cluster_health import cluster_may_call
from queues.services import (
    cluster_lifecycle,
    notifications,
    protection,
    quotas,
    reconcile,
    reservations,
    storage,
)
from queues.services.jobs import apply as job_apply
from queues.services.jobs import sync as job_sync

logger = logging.getLogger(__name__)

# A few quick retries cover a blip; a longer outage is covered by the beat's reconcile_all
# every minute and the sync's re-apply, so retries never pile up while a cluster is down.
KUBE = (kube.TransientError,)
# A mail server or webhook that is down is tried for about an hour.
NOTIFY = (notifications.NotifyError,)
NOTIFY_RETRY = {"max_retries": 8, "backoff_base": 10.0, "backoff_cap": 900.0}


@task(name="queues.reconcile_cluster", transient=KUBE, acks_late=True)
def reconcile_cluster(cluster_id: int) -> dict | None:
    """Render the cluster's desired state and apply whatever lags."""
    if not Cluster.objects.filter(pk=cluster_id).exists():
        return None
    try:
        return reconcile.cluster_reconcile(cluster_id=cluster_id)
    finally:
        # What reached the cluster settles the quota requests waiting for it, errors included.
        quotas.quota_requests_settle(cluster_id=cluster_id)
        # Jobs that found their team's namespace missing are sent again now that it may exist.
        if job_apply.jobs_waiting_for_namespace(cluster_id=cluster_id):
            job_apply.jobs_apply_request(cluster_id=cluster_id)


@task(name="queues.apply_managed_object", transient=KUBE, acks_late=True)
def apply_managed_object(object_id: int) -> str:
    """Apply (or delete) one managed object if its applied generation lags (not while its
    cluster does not answer: reconcile_all sends lagging objects again)."""
    cluster_id = reconcile.managed_object_cluster_id(object_id=object_id)
    if cluster_id is None:
        return "gone"
    cluster = Cluster.objects.filter(pk=cluster_id).first()
    if cluster is None or not cluster_may_call(cluster=cluster):
        return "cluster disabled or not answering"
    try:
        return reconcile.managed_object_apply(object_id=object_id)
    finally:
        if cluster_id is not None:
            quotas.quota_requests_settle(cluster_id=cluster_id)


@task(name="queues.reconcile_all", acks_late=True)
def reconcile_all() -> None:
    """Beat: reconcile every cluster, and re-enqueue objects whose apply was lost."""
    for cluster_id in Cluster.objects.filter(enabled=True).values_list("pk", flat=True):
        reconcile_cluster.delay(cluster_id)
    for object_id in reconcile.managed_objects_lagging():
        apply_managed_object.delay(object_id)
    # Cancelled jobs whose objects are still in an enabled cluster (a deletion lost, or given
    # up while the cluster did not answer).
    for job_id in job_apply.jobs_delete_pending():
        delete_job.delay(job_id)


@task(name="queues.check_drift", acks_late=True)
def check_drift(cluster_id: int | None = None) -> None:
    """Beat: re-read applied objects and restore the ones edited or deleted in the cluster."""
    enabled = Cluster.objects.filter(enabled=True)
    ids = [cluster_id] if cluster_id else list(enabled.values_list("pk", flat=True))
    for pk in ids:
        try:
            drifted = reconcile.cluster_check_drift(cluster_id=pk)["drifted"]
        except kube.KubeError as exc:
            # Unreachable or misconfigured now; the next run looks again.
            logger.warning("drift check of cluster %s skipped: %s", pk, exc)
            continue
        if drifted:
            reconcile_cluster.delay(pk)


@task(name="queues.expire_burst_grants", acks_late=True)
def expire_burst_grants() -> list[int]:
    """Beat: revert burst grants whose end date has passed."""
    return quotas.quota_bursts_expire()


@task(name="queues.advance_reservations", acks_late=True)
def advance_reservations() -> list[int]:
    """Beat: move reservations on as their lead time, start and end come (idempotent: each
    transition locks its row and checks its state; the reconcile renders what is in force)."""
    return reservations.reservations_advance()


@task(name="queues.apply_jobs", transient=KUBE, acks_late=True, max_retries=8,
      on_retry=job_apply.jobs_apply_retrying)  # fmt: skip
def apply_jobs(cluster_id: int) -> dict:
    """Create the cluster's submitted jobs' objects (idempotent: claims, generations and
    server-side apply by deterministic name)."""
    # Jobs left behind when the retries give up stay submitted; the sync asks again.
    return job_apply.jobs_apply_ready(cluster_id=cluster_id, run=current_run_id())


@task(name="queues.delete_job", transient=KUBE, acks_late=True, max_retries=8)
def delete_job(job_id: int) -> int:
    """Delete a cancelled job's objects (pods go with them, in the background); not while its
    cluster is disabled (the deletion waits for it to be enabled)."""
    return job_apply.job_delete_objects(job_id=job_id)


@task(name="queues.remove_team_secret", transient=KUBE, acks_late=True, max_retries=12,
      backoff_base=10.0, backoff_cap=900.0)  # fmt: skip
def remove_team_secret(cluster_id: int, team_id: int, name: str) -> bool:
    """Delete a team secret the portal deleted while its cluster did not answer."""
    return storage.secret_remove_from_cluster(cluster_id=cluster_id, team_id=team_id, name=name)


@task(name="queues.sync_jobs")
def sync_jobs() -> dict:
    """Periodic: observed status of every active job; re-send applies that were lost."""
    for cluster_id, job_ids in job_apply.jobs_reapply_lost().items():
        if cluster_id is not None:
            apply_jobs.delay(cluster_id)
        else:  # no cluster to apply to: job_apply records why they failed, without I/O
            for job_id in job_ids:
                job_apply.job_apply(job_id=job_id)
    return job_sync.jobs_sync_all()


@task(name="queues.remove_cluster_objects", transient=KUBE, acks_late=True, max_retries=6,
      on_retry=cluster_lifecycle.cluster_objects_remove_gave_up)  # fmt: skip
def remove_cluster_objects(cluster_id: int) -> dict:
    """A cluster was deleted: remove what the portal keeps there (when it answers), then the
    row when no history refers to it."""
    return cluster_lifecycle.cluster_objects_remove(cluster_id=cluster_id)


@task(name="queues.notify_job")
def notify_job(job_id: int, state: str) -> None:
    """Tell the owner and the team's webhook about a state change (one task per channel)."""
    notifications.job_notify(job_id=job_id, state=state)


@task(name="queues.send_email", transient=NOTIFY, **NOTIFY_RETRY)
def send_email(recipients: list[str], subject: str, body: str) -> None:
    """Send one e-mail; a mail server that is down is tried again with backoff."""
    notifications.email_send(recipients=recipients, subject=subject, body=body)


@task(name="queues.post_webhook", transient=NOTIFY, **NOTIFY_RETRY)
def post_webhook(url: str, text: str) -> None:
    """Post one message to a team webhook; a webhook that is down is tried again with backoff."""
    notifications.webhook_post(url=url, text=text)


@task(name="queues.protection_sweep", acks_late=True)
def protection_sweep() -> dict:
    """Beat: read the checkpoint markers of running jobs' logs, then move running jobs between
    priority classes (protected, by checkpoint age, their tier's own while waiting); both
    idempotent."""
    recorded = protection.checkpoints_from_logs()
    return {**protection.protection_sweep(), "checkpoints_from_logs": recorded}


@task(name="queues.job_priority_class_apply", transient=KUBE, acks_late=True)
def job_priority_class_apply(job_id: int) -> str:
    """Set one job's priority class on its cluster object (a label patch)."""
    return protection.job_priority_class_apply(job_id=job_id)
