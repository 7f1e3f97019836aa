"""What the status sync records on a job from what the cluster shows: a state change at the
cluster's time, the fields that changed, the states it passed through unseen, a job whose
objects were lost. The sync (queues.services.jobs.sync) and each scheduler's backend
(queues.backends) read the cluster's objects; these write what they read, the same way for all.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.utils import timezone
from django.utils.dateparse import parse_datetime

from queues.models import Job
from queues.services.jobs.lifecycle import job_transition

S = Job.State

# A Job the portal applied but cannot find is only declared lost after this long, so a sync
# racing the apply task never fails a job that is being created.
LOST_AFTER = timedelta(seconds=60)
SUSPENDED_TEXT = (
    "Suspended because its GPUs were idle (the tier's idle-GPU policy); it waits until its "
    "owner or a team lead resumes it from the job page."
)
# The states a job passes through before it ends, in order, with what the cluster says of each.
_PATH = (S.QUEUED, S.ADMITTED, S.RUNNING)


def cluster_time(value) -> datetime | None:
    """A time as the cluster writes it (RFC 3339), aware; None when absent."""
    if not value:
        return None
    parsed = parse_datetime(value)
    if parsed is not None and timezone.is_naive(parsed):
        parsed = timezone.make_aware(parsed, timezone.utc)
    return parsed


def condition(obj: dict, ctype: str) -> dict | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype:
            return cond
    return None


def condition_true(obj: dict | None, ctype: str) -> dict | None:
    cond = condition(obj or {}, ctype)
    return cond if cond and cond.get("status") == "True" else None


def job_move(job: Job, to_state: str, reason: str, *, at=None, fields=None) -> bool:
    if job.state == to_state:
        # Already there (a running job, say, seen again each sync): write only what changed,
        # without locking the row, so a sync of unchanged jobs writes nothing.
        job_fields_set(job, **(fields or {}))
        return False
    moved = job_transition(
        job_id=job.pk,
        to_state=to_state,
        reason=reason,
        at=at,
        fields=fields,
        from_states=(job.state,),
    )
    if moved:
        job.state = to_state
        return True
    return False


def job_catch_up(job: Job, stages: list[tuple[str, datetime | None, str]]) -> bool:
    """Record the states the cluster passed through that the sync did not see (a job that
    queued, ran and finished between two syncs), each at the cluster's own time, in order, so
    the timeline keeps them all. `stages` are (state, cluster time, reason) the cluster shows."""
    moved = False
    for state, at, reason in stages:
        if job.state == S.PREEMPTED or job.state in Job.FINAL_STATES:
            break
        current = _PATH.index(job.state) if job.state in _PATH else -1  # submitted: before all
        if _PATH.index(state) > current:
            moved = job_move(job, state, reason, at=at) or moved
    return moved


def pods_started(pods: list[dict]) -> datetime | None:
    times = [cluster_time((p.get("status") or {}).get("startTime")) for p in pods]
    times = [t for t in times if t]
    return min(times) if times else None


def _differs(job: Job, name: str, value) -> bool:
    field = Job._meta.get_field(name)
    if field.is_relation:  # compare ids: the related row may not be loaded
        return getattr(job, field.attname) != (value.pk if value is not None else None)
    return getattr(job, name) != value


def job_fields_set(job: Job, **values) -> None:
    """Write plain fields that changed (no state change)."""
    changed = {k: v for k, v in values.items() if _differs(job, k, v)}
    if changed:
        Job.objects.filter(pk=job.pk).update(**changed)
        for k, v in changed.items():
            setattr(job, k, v)


def waiting_cleared() -> dict:
    """The fields that say why and how long a job waits, emptied (it no longer waits)."""
    return {"pending_reason": "", "queue_position": None, "estimated_start": None,
            "estimate_basis": ""}  # fmt: skip


def job_maybe_lost(job: Job, now) -> bool:
    """A job whose objects are gone from the cluster fails (once it had time to appear)."""
    if job.state == S.SUBMITTED or job.applied_generation == 0:
        return False
    since = job.submitted_at or job.created_at
    if since and now - since < LOST_AFTER:
        return False
    text = "The job's objects disappeared from the cluster (deleted outside the portal?)."
    return job_move(job, S.FAILED, text, fields={**waiting_cleared(), "exit_reason": text})
