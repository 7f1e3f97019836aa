"""Celery tasks for jobs: apply, delete, periodic status sync, notifications. Thin: they take
ids, call a service, and retry transient cluster errors with backoff."""

import logging

from celery import shared_task

from fleet import kube
from queues.job_notify import NotifyError, job_notify
from queues.services import job_sync

log = logging.getLogger(__name__)


def _backoff(retries: int) -> float:
    return min(60.0, 0.5 * 2**retries)


@shared_task(name="queues.apply_jobs", bind=True, ignore_result=True, acks_late=True, max_retries=8)
def apply_jobs(self, cluster_id: int) -> dict:
    """Create the cluster's submitted jobs' objects (idempotent: claims, generations and
    server-side apply by deterministic name)."""
    try:
        return job_sync.jobs_apply_ready(cluster_id=cluster_id)
    except kube.TransientError as exc:
        if self.request.retries >= self.max_retries:
            # The periodic sync asks again for jobs left behind; they stay submitted meanwhile.
            log.warning("cluster %s: giving up applying jobs for now: %s", cluster_id, exc)
            return {"deferred": 1}
        raise self.retry(exc=exc, countdown=_backoff(self.request.retries)) from exc


@shared_task(name="queues.delete_job", bind=True, ignore_result=True, acks_late=True, max_retries=8)
def delete_job(self, job_id: int) -> int:
    """Delete a cancelled job's objects (pods go with them, in the background)."""
    try:
        return job_sync.job_delete_objects(job_id=job_id)
    except kube.TransientError as exc:
        raise self.retry(exc=exc, countdown=_backoff(self.request.retries)) from exc


@shared_task(name="queues.sync_jobs", ignore_result=True)
def sync_jobs() -> dict:
    """Periodic: observed status of every active job; re-send applies that were lost."""
    for cluster_id, job_ids in job_sync.jobs_reapply_lost().items():
        if cluster_id is not None:
            apply_jobs.delay(cluster_id)
        else:  # no cluster to apply to: job_apply records why they failed, without I/O
            for job_id in job_ids:
                job_sync.job_apply(job_id=job_id)
    return job_sync.jobs_sync_all()


@shared_task(name="queues.notify_job", bind=True, ignore_result=True, max_retries=3)
def notify_job(self, job_id: int, state: str) -> None:
    """E-mail the owner and post to the team's webhook about a state change."""
    try:
        job_notify(job_id=job_id, state=state)
    except NotifyError as exc:
        raise self.retry(exc=exc, countdown=_backoff(self.request.retries) * 10) from exc
