"""Suspending a job whose GPUs sat idle, and resuming it, through its cluster's scheduler (Kueue
turns its Workload inactive: its pods stop and its quota goes back to the queue until it is
active again, when it is queued and admitted as any other; see queues.backends.kueue).
billing.services.idle decides when; these only act, audited."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from fleet import kube
from queues.backends import backend_for
from queues.models import Job
from queues.services.audit import audit
from queues.services.jobs.lifecycle import job_can_cancel


def _writable(cluster) -> None:
    """A disabled cluster gets no writes (raised as a cluster that does not answer)."""
    if not cluster.enabled:
        raise kube.ClusterUnavailable(
            f"cluster {cluster.name} is disabled by the platform admins; nothing is sent to it "
            "until it is enabled",
            reason="Disabled",
        )


def job_idle_suspend(*, job: Job, reason: str) -> Job:
    """Deactivate a running job's Workload (the idle policy's action); raises kube errors."""
    if job.cluster is None:
        raise ValidationError("Only jobs queued by Kueue can be suspended.")
    _writable(job.cluster)
    backend_for(job.cluster).job_set_active(job, False)
    now = timezone.now()
    with transaction.atomic():
        Job.objects.filter(pk=job.pk).update(idle_suspended_at=now)
        audit(actor=None, verb="job.idle_suspend", obj=job, team=job.team, message=reason)
    job.refresh_from_db()
    return job


def job_can_resume(*, user, job: Job) -> bool:
    return job.idle_suspended_at is not None and job_can_cancel(user=user, job=job)


def job_idle_resume(*, job: Job, user) -> Job:
    """Make a suspended job's Workload active again: Kueue queues it, and it runs when admitted.
    The owner, a lead of the team or a platform admin may."""
    if not job_can_cancel(user=user, job=job):
        raise PermissionDenied("Only the job's owner or a team lead can resume it.")
    if job.idle_suspended_at is None or job.state in Job.FINAL_STATES:
        raise ValidationError("The job is not suspended.")
    _writable(job.cluster)
    backend_for(job.cluster).job_set_active(job, True)
    with transaction.atomic():
        Job.objects.filter(pk=job.pk).update(
            idle_suspended_at=None, idle_warned_at=None, idle_since=None, idle_util=None
        )
        audit(actor=user, verb="job.idle_resume", obj=job, team=job.team)
    job.refresh_from_db()
    return job
