"""Preemption protection and checkpoint-aware victims (queues.manifests.protection tells how
Kueue is told): checkpoints a job reports, the sweep that moves running jobs between priority
classes, setting a job's class on its cluster object, and recording what a preemption lost."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from fleet import kube
from fleet.models import Cluster
from queues.backends import backend_for, backend_named
from queues.manifests.protection import desired_class, protection_on
from queues.models import Job, JobCheckpoint, JobPreemption, PriorityTier
from queues.selectors.protection import checkpoint_latest, run_starts
from queues.services.audit import audit
from queues.services.jobs.lifecycle import job_can_cancel

log = logging.getLogger(__name__)
S = Job.State
HOLDING = (S.ADMITTED, S.RUNNING)
# Jobs whose class may still need to go back to their tier's own (requeued, preempted).
CLUSTER_PRECISION = timedelta(seconds=1)
ACTIVE = (S.SUBMITTED, S.QUEUED, S.ADMITTED, S.RUNNING, S.PREEMPTED)


def checkpoint_report(
    *, job: Job, actor, step: int | None = None, path: str = "", source: str = "api",
    at: datetime | None = None,
) -> JobCheckpoint:  # fmt: skip
    """Record a checkpoint of a running job (its owner, a team lead, an admin); the job moves to
    the class of a fresh checkpoint at once."""
    if actor is not None and not job_can_cancel(user=actor, job=job):
        raise PermissionDenied("Only the job's owner or a team lead can report its checkpoints.")
    now = timezone.now()
    at = min(at or now, now)
    with transaction.atomic():
        current = Job.objects.select_for_update().get(pk=job.pk)
        if current.state not in HOLDING:
            raise ValidationError(
                f"The job is {current.get_state_display().lower()}: only a running job reports "
                "checkpoints."
            )
        checkpoint = JobCheckpoint.objects.create(
            job=current, at=at, step=step, path=path, source=source, reported_by=actor
        )
        if current.last_checkpoint_at is None or at > current.last_checkpoint_at:
            Job.objects.filter(pk=job.pk).update(last_checkpoint_at=at)
        audit(
            actor=actor, verb="job.checkpoint", obj=current, team=current.team,
            after={"at": at.isoformat(), "step": step, "path": path, "source": source},
        )  # fmt: skip
    protection_sweep(job_ids=[job.pk], now=now)
    return checkpoint


def _protected_schedulers() -> list[str]:
    return [s for s in Cluster.Scheduler.values if backend_named(s).priority_protection]


def protection_sweep(*, job_ids=None, now: datetime | None = None) -> dict[str, int]:
    """Give every active job on a Kueue cluster the class it should carry now (protected,
    past its window by checkpoint age, or its tier's own while it waits), and send the changed
    ones to their clusters. Idempotent: a second run changes nothing; a class that did not
    reach its cluster is sent again."""
    now = now or timezone.now()
    tiers = list(PriorityTier.objects.all())
    on = protection_on(tiers)
    by_tier = {t.pk: t for t in tiers}
    jobs = Job.objects.filter(
        state__in=ACTIVE, cluster__scheduler__in=_protected_schedulers()
    ).only("pk", "state", "tier_id", "priority_class", "priority_class_applied",
           "last_checkpoint_at")  # fmt: skip
    if job_ids is not None:
        jobs = jobs.filter(pk__in=list(job_ids))
    if not on:
        jobs = jobs.exclude(priority_class="", priority_class_applied="")
    jobs = list(jobs)
    starts = run_starts(job_ids=[j.pk for j in jobs if j.state in HOLDING])
    changed = resent = 0
    for job in jobs:
        desired = desired_class(
            tier=by_tier[job.tier_id], tiers_protect=on, running=job.state in HOLDING,
            run_started_at=starts.get(job.pk), checkpoint_at=job.last_checkpoint_at, now=now,
        )  # fmt: skip
        if desired != job.priority_class:
            # Only if no other sweep moved it meanwhile (the last writer sends it).
            if Job.objects.filter(pk=job.pk, priority_class=job.priority_class).update(
                priority_class=desired
            ):
                changed += 1
                _enqueue_apply(job.pk)
        elif job.priority_class != job.priority_class_applied:
            resent += 1
            _enqueue_apply(job.pk)
    return {"jobs": len(jobs), "changed": changed, "resent": resent}


def _enqueue_apply(job_id: int) -> None:
    from queues.tasks import job_priority_class_apply

    transaction.on_commit(lambda: job_priority_class_apply.delay(job_id))


def job_priority_class_apply(*, job_id: int) -> str:
    """Set the job's class on its cluster object (kube errors raise; a job not in the cluster
    yet gets it when it is applied, since the job's manifest names it)."""
    job = Job.objects.select_related("team", "tier", "cluster").filter(pk=job_id).first()
    if job is None:
        return "gone"
    wanted = job.priority_class
    if wanted == job.priority_class_applied:
        return "current"
    in_cluster = (
        job.cluster is not None and job.k8s_name and job.applied_generation > 0
        and job.state not in Job.FINAL_STATES
    )  # fmt: skip
    outcome = "rendered"
    if in_cluster:
        try:
            backend_for(job.cluster).job_set_priority_class(job, wanted or job.tier.name)
            outcome = "set"
        except kube.NotFound:
            outcome = "object gone"
    Job.objects.filter(pk=job_id, priority_class=wanted).update(priority_class_applied=wanted)
    return outcome


def preemption_record(*, job_id: int, at: datetime) -> JobPreemption | None:
    """Record what a preemption at `at` lost: the job's GPUs times the time since its last
    checkpoint in that run (or since the run began). Called in the transaction that moves the
    job to preempted; a job that never ran lost nothing."""
    job = Job.objects.only("pk", "team_id", "workers", "gpus_per_worker", "priority_class").get(
        pk=job_id
    )
    start = run_starts(job_ids=[job_id], before=at).get(job_id)
    if start is None:
        return None
    # The cluster stamps the preemption to the second: a checkpoint within that second came
    # before it.
    saved = checkpoint_latest(job_id=job_id, since=start, until=at + CLUSTER_PRECISION)
    since = min(saved.at, at) if saved else start
    seconds = max(0, int((at - since).total_seconds()))
    loss, _ = JobPreemption.objects.get_or_create(
        job_id=job_id,
        at=at,
        defaults={
            "team_id": job.team_id,
            "run_started_at": start,
            "checkpoint_at": since if saved else None,
            "gpus": job.total_gpus,
            "lost_gpu_seconds": seconds * job.total_gpus,
            "priority_class": job.priority_class,
        },
    )
    return loss
