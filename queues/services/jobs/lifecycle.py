"""A job's life after submission: the one way a job changes state (lock, check the move is
allowed, stamp the time, record the transition, and tell the owner after commit; every change of
Job.state goes through here), and cancelling it. Suspending and resuming a job whose GPUs sat
idle is queues.services.jobs.idle."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from core.metrics import JOB_QUEUE_WAIT, JOB_TRANSITIONS
from core.roles import is_platform_admin
from queues.models import Job, JobTransition
from queues.selectors.tenancy import user_is_team_lead
from queues.services.audit import audit

S = Job.State

# Which state may follow which. The cluster can skip states we never saw (a 1-second job may be
# queued, admitted and finished between two syncs), so later states are reachable directly.
ALLOWED = {
    S.DRAFT: {S.PENDING_APPROVAL, S.SUBMITTED, S.CANCELLED},
    S.PENDING_APPROVAL: {S.SUBMITTED, S.REJECTED, S.CANCELLED},
    S.SUBMITTED: {S.QUEUED, S.ADMITTED, S.RUNNING, S.SUCCEEDED, S.FAILED, S.PREEMPTED,
                  S.CANCELLED},
    S.QUEUED: {S.ADMITTED, S.RUNNING, S.SUCCEEDED, S.FAILED, S.PREEMPTED, S.CANCELLED},
    S.ADMITTED: {S.QUEUED, S.RUNNING, S.SUCCEEDED, S.FAILED, S.PREEMPTED, S.CANCELLED},
    S.RUNNING: {S.QUEUED, S.SUCCEEDED, S.FAILED, S.PREEMPTED, S.CANCELLED},
    # Kueue requeues a preempted workload; it stays "preempted" until admitted again.
    S.PREEMPTED: {S.QUEUED, S.ADMITTED, S.RUNNING, S.SUCCEEDED, S.FAILED, S.CANCELLED},
    S.SUCCEEDED: set(),
    S.FAILED: set(),
    S.CANCELLED: set(),
    S.REJECTED: set(),
}  # fmt: skip

# The transition timestamps in the order a job passes them (finished_at last).
STAMP_FIELDS = ("submitted_at", "queued_at", "admitted_at", "started_at", "finished_at")
TIMESTAMP_FIELD = {
    S.SUBMITTED: "submitted_at",
    S.QUEUED: "queued_at",
    S.ADMITTED: "admitted_at",
    S.RUNNING: "started_at",
    S.SUCCEEDED: "finished_at",
    S.FAILED: "finished_at",
    S.CANCELLED: "finished_at",
    S.REJECTED: "finished_at",
}

# States the owner (and the team webhook) hears about.
NOTIFY_STATES = {
    S.PENDING_APPROVAL,
    S.RUNNING,
    S.SUCCEEDED,
    S.FAILED,
    S.PREEMPTED,
    S.CANCELLED,
    S.REJECTED,
}


def _preemption_record(job_id: int, at) -> None:
    # Imported here: queues.services.protection asks this module who may act on a job.
    from queues.services.protection import preemption_record

    preemption_record(job_id=job_id, at=at)


class TransitionError(ValidationError):
    """A state change that the job's current state does not allow."""


def _transition_update(current: dict, to_state: str, at, fields: dict | None) -> tuple[dict, ...]:
    """The columns a move to `to_state` writes, given the job's current state and stamps, and
    the time recorded for it."""
    now = timezone.now()
    at = min(at, now) if at else now
    # Cluster clocks have second precision and may lag ours: never let a later state carry an
    # earlier time than the states before it.
    earlier = [current[f] for f in STAMP_FIELDS[:4] if current[f] is not None]
    if earlier:
        at = max(at, *earlier)
    update = {"state": to_state}
    stamp = TIMESTAMP_FIELD.get(to_state)
    if stamp and current[stamp] is None:
        update[stamp] = at
    update.update(fields or {})
    return update, at


def _count_on_commit(current: dict, to_state: str, at) -> None:
    """Count the move (core.metrics) once it is committed; a job leaving the queue (admitted, or
    seen running at once) observes how long it waited since its submission."""
    waited = None
    if (
        to_state in (S.ADMITTED, S.RUNNING)
        and current["submitted_at"] is not None
        and current["admitted_at"] is None
        and current["started_at"] is None
    ):
        waited = max(0.0, (at - current["submitted_at"]).total_seconds())

    def count():
        JOB_TRANSITIONS.labels(to_state).inc()
        if waited is not None:
            JOB_QUEUE_WAIT.observe(waited)

    transaction.on_commit(count)


def job_transition(
    *,
    job_id: int,
    to_state: str,
    reason: str = "",
    at=None,
    fields: dict | None = None,
    from_states=None,
) -> bool:
    """Move a job to a state: lock, check, stamp, record. False when it is already there, or
    when `from_states` is given and the job has meanwhile left them (a lost race, not an error).

    Only the state and its timestamps are read (under the row lock) and only the changed
    columns written: this runs for every job several times, from the apply task and the sync.
    """
    with transaction.atomic():
        current = (
            Job.objects.select_for_update().filter(pk=job_id).values("state", *STAMP_FIELDS).get()
        )
        state = current["state"]
        if from_states is not None and state not in from_states:
            return False
        if state == to_state:
            if fields:
                Job.objects.filter(pk=job_id).update(**fields)
            return False
        if to_state not in ALLOWED[state]:
            raise TransitionError(
                f"A {S(state).label.lower()} job cannot become {S(to_state).label.lower()}."
            )
        update, at = _transition_update(current, to_state, at, fields)
        Job.objects.filter(pk=job_id).update(**update)
        JobTransition.objects.create(
            job_id=job_id, from_state=state, to_state=to_state, at=at, reason=reason[:2000]
        )
        _count_on_commit(current, to_state, at)
        if to_state == S.PREEMPTED:
            _preemption_record(job_id, at)
        if to_state in NOTIFY_STATES:
            transaction.on_commit(lambda: job_notify_enqueue(job_id, to_state))
    return True


def jobs_transition(
    *, fields_by_job: dict[int, dict], to_state: str, from_state: str, reason: str = ""
) -> list[int]:
    """job_transition for a batch of jobs moving from one state to another, each with its own
    fields: their states are locked and read in one query and the transitions inserted in one.
    Returns the ids that moved; jobs that have meanwhile left `from_state` are left alone."""
    if to_state not in ALLOWED[from_state]:
        raise TransitionError(f"A {from_state} job cannot become {to_state}.")
    moved, records = [], []
    with transaction.atomic():
        rows = (
            Job.objects.select_for_update()
            .filter(pk__in=list(fields_by_job), state=from_state)
            .order_by("pk")
            .values("pk", *STAMP_FIELDS)
        )
        for current in rows:
            job_id = current["pk"]
            update, at = _transition_update(current, to_state, None, fields_by_job[job_id])
            # An update per row, inside the one transaction: bulk_update's CASE expressions
            # measured three to four times the CPU for batches of 5 to 50.
            Job.objects.filter(pk=job_id).update(**update)
            _count_on_commit(current, to_state, at)
            records.append(
                JobTransition(job_id=job_id, from_state=from_state, to_state=to_state, at=at,
                              reason=reason[:2000])
            )  # fmt: skip
            moved.append(job_id)
        JobTransition.objects.bulk_create(records)
        if to_state == S.PREEMPTED:
            for record in records:
                _preemption_record(record.job_id, record.at)
        if to_state in NOTIFY_STATES:
            for job_id in moved:
                transaction.on_commit(lambda job_id=job_id: job_notify_enqueue(job_id, to_state))
    return moved


def job_notify_enqueue(job_id: int, state: str) -> None:
    # The tasks import this module (through the sync service): import them when sending.
    from queues.tasks import notify_job

    notify_job.delay(job_id, state)


# -- cancelling ---------------------------------------------------------------------------------


def _enqueue_delete(job_id: int) -> None:
    from queues.tasks import delete_job

    delete_job.delay(job_id)


def job_can_cancel(*, user, job: Job) -> bool:
    return (
        job.owner_id == user.pk
        or is_platform_admin(user)
        or user_is_team_lead(user=user, team=job.team)
    )


def job_cancel(*, job: Job, user) -> Job:
    """Cancel a job: delete its cluster objects (by a task) and keep the record."""
    if not job_can_cancel(user=user, job=job):
        raise PermissionDenied("Only the job's owner or a team lead can cancel it.")
    with transaction.atomic():
        current = Job.objects.select_for_update().get(pk=job.pk)
        if current.state in Job.FINAL_STATES:
            raise TransitionError(f"The job has already {current.get_state_display().lower()}.")
        in_cluster = current.state not in (S.DRAFT, S.PENDING_APPROVAL)
        job_transition(
            job_id=job.pk,
            to_state=S.CANCELLED,
            reason=f"Cancelled by {user.get_username()}.",
            # Its objects are deleted by a task; until that is done (its cluster may be
            # disabled, or not answering) the job says so and the reconciler sends it again.
            fields={"pending_reason": "", "queue_position": None, "estimated_start": None,
                    "cluster_delete_pending": in_cluster and current.cluster_id is not None},
        )  # fmt: skip
        audit(actor=user, verb="job.cancel", obj=job, team=job.team)
        if in_cluster:
            transaction.on_commit(lambda: _enqueue_delete(job.pk))
    job.refresh_from_db()
    return job
