"""Reads for preemption protection: when a job's current run began, its checkpoints, and what
its page and the API say about its protection."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Max

from queues.manifests.protection import protected_until
from queues.models import Job, JobCheckpoint, JobPreemption, JobTransition

S = Job.State
_HOLDING = (S.ADMITTED, S.RUNNING)


def run_starts(*, job_ids, before: datetime | None = None) -> dict[int, datetime]:
    """job id -> when its current (or last, up to `before`) run began: its latest move into
    admitted or running from a state that held no quota."""
    qs = JobTransition.objects.filter(job_id__in=list(job_ids), to_state__in=_HOLDING).exclude(
        from_state__in=_HOLDING
    )
    if before is not None:
        qs = qs.filter(at__lte=before)
    return dict(qs.values("job_id").annotate(start=Max("at")).values_list("job_id", "start"))


def checkpoint_latest(*, job_id: int, since=None, until=None) -> JobCheckpoint | None:
    qs = JobCheckpoint.objects.filter(job_id=job_id)
    if since is not None:
        qs = qs.filter(at__gte=since)
    if until is not None:
        qs = qs.filter(at__lte=until)
    return qs.order_by("-at", "-id").first()


def _ago(delta) -> str:
    seconds = max(0, int(delta.total_seconds()))
    if seconds < 90:
        return f"{seconds} seconds ago" if seconds != 1 else "1 second ago"
    minutes = round(seconds / 60)
    if minutes < 90:
        return f"{minutes} minutes ago"
    return f"{round(minutes / 60)} hours ago"


def job_protection(*, job: Job, now: datetime) -> dict:
    """What the job page and the API tell about protection: until when the current run is
    protected, the latest checkpoint, and why the latest preemption chose it."""
    latest = checkpoint_latest(job_id=job.pk)
    out: dict = {
        "protection_minutes": job.tier.protection_minutes,
        "protected_until": None,
        "protected": False,
        "priority_class": job.priority_class or job.tier.name,
        "last_checkpoint_at": latest.at if latest else None,
        "last_checkpoint_step": latest.step if latest else None,
        "last_checkpoint_ago": _ago(now - latest.at) if latest else "",
        "preemption": None,
    }
    if job.state in _HOLDING:
        until = protected_until(job.tier, run_starts(job_ids=[job.pk]).get(job.pk))
        out["protected_until"] = until
        out["protected"] = until is not None and now < until
    loss = JobPreemption.objects.filter(job=job).order_by("-at", "-id").first()
    if loss is not None:
        if loss.checkpoint_at is not None:
            why = f"it saved {_ago(loss.at - loss.checkpoint_at)}"
            why = why.replace(" ago", " before")
        else:
            why = "it had no checkpoint in that run"
        out["preemption"] = {
            "at": loss.at,
            "checkpoint_at": loss.checkpoint_at,
            "lost_gpu_hours": round(loss.lost_gpu_seconds / 3600, 2),
            "priority_class": loss.priority_class,
            "why": why,
        }
    return out


def job_protection_shown(*, job: Job, now: datetime) -> dict | None:
    """job_protection for the jobs it concerns (a protected tier, a class set, a checkpoint or
    a preemption); None, without a query, for the others."""
    if not (job.tier.protection_minutes or job.priority_class or job.last_checkpoint_at
            or job.preemptions):  # fmt: skip
        return None
    return job_protection(job=job, now=now)
