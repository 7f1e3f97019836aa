"""The demo's preemption protection: the experiment tier guarantees half an hour before other
teams may reclaim; the history's preempted jobs get the checkpoints their runs saved and what
each preemption lost; and a long fine-tuning job of vision is submitted, protected once it runs
(seed_demo leaves it for the worker to apply)."""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction

from demo.history import CHECKPOINT_VOLUME, HISTORY_KEY
from queues.models import Job, JobCheckpoint, JobPreemption, JobTransition, PriorityTier, Team
from queues.selectors.protection import run_starts
from queues.services.jobs.submit import job_submit
from queues.services.protection import preemption_record

PROTECTED_TIER = "experiment"
PROTECTION_MINUTES = 30
SAVE_EVERY = timedelta(minutes=20)  # how often the history's checkpointed jobs saved
LIVE_KEY = "demo-protected"


@transaction.atomic
def seed_protection() -> dict:
    """Idempotent: the tier's window set once (an admin may change it), history backfilled once,
    the live job submitted once."""
    PriorityTier.objects.filter(name=PROTECTED_TIER, protection_minutes=0).update(
        protection_minutes=PROTECTION_MINUTES
    )
    losses = 0
    preempted = Job.objects.filter(idempotency_key__startswith=HISTORY_KEY, preemptions__gt=0)
    if not JobPreemption.objects.filter(job__in=preempted).exists():
        moves = JobTransition.objects.filter(
            job__in=preempted, to_state=Job.State.PREEMPTED
        ).select_related("job")
        for move in moves.order_by("at", "pk"):
            if move.job.checkpoint_volume:
                _checkpoints(move.job, until=move.at)
            if preemption_record(job_id=move.job_id, at=move.at) is not None:
                losses += 1
    return {"losses": losses, "live": _live_job()}


def _checkpoints(job: Job, *, until) -> None:
    """The checkpoints a run saved before `until`, every SAVE_EVERY since it began."""
    start = run_starts(job_ids=[job.pk], before=until).get(job.pk)
    if start is None:
        return
    at, step, rows = start + SAVE_EVERY, 0, []
    while at < until:
        step += 1000
        rows.append(JobCheckpoint(job=job, at=at, step=step, source=JobCheckpoint.Source.LOG,
                                  path=f"/checkpoints/step-{step}"))  # fmt: skip
        at += SAVE_EVERY
    JobCheckpoint.objects.bulk_create(rows)
    if rows:
        Job.objects.filter(pk=job.pk).update(last_checkpoint_at=rows[-1].at)


def _live_job() -> int | None:
    """vision's long fine-tuning run on the A100s (submitted once; the worker applies it)."""
    team = Team.objects.filter(slug="vision").first()
    if team is None or Job.objects.filter(idempotency_key=LIVE_KEY).exists():
        return None
    owner = team.memberships.filter(user__username="alice").first()
    if owner is None:
        return None
    job = job_submit(
        user=owner.user, team=team, idempotency_key=LIVE_KEY, name="long-finetune",
        image="ghcr.io/acme/vision-train:2.3", command=["torchrun", "train.py"], workers=1,
        gpus_per_worker=2, pool="a100", tier=PROTECTED_TIER, max_runtime_seconds=8 * 3600,
        expected_runtime_seconds=6 * 3600, checkpoint_volume=CHECKPOINT_VOLUME,
    )  # fmt: skip
    return job.pk
