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


@shared_task(name="queues.apply_job", bind=True, ignore_result=True, acks_late=True, max_retries=8)
def apply_job(self, job_id: int) -> str:
    """Create the job's objects in its cluster (idempotent: apply by deterministic name)."""
    try:
        return job_sync.job_apply(job_id=job_id)
    except kube.TransientError as exc:
        if self.request.retries >= self.max_retries:
            # The periodic sync sends lagging jobs again; the job stays submitted meanwhile.
            log.warning("job %s: giving up applying for now: %s", job_id, exc)
            return "deferred"
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
    for job_id in job_sync.jobs_reapply_lost():
        apply_job.delay(job_id)
    return job_sync.jobs_sync_all()


@shared_task(name="queues.notify_job", bind=True, ignore_result=True, max_retries=3)
def notify_job(self, job_id: int, state: str) -> None:
    """E-mail the owner and post to the team's webhook about a state change."""
    try:
        job_notify(job_id=job_id, state=state)
    except NotifyError as exc:
        raise self.retry(exc=exc, countdown=_backoff(self.request.retries) * 10) from exc
