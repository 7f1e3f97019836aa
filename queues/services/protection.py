"""Preemption protection and checkpoint-aware victims (queues.manifests.protection tells how
Kueue is told): checkpoints a job reports, the sweep that moves running jobs between priority
classes, setting a job's class on its cluster object, and recording what a preemption lost."""

from __future__ import annotations

import logging
import re
from datetime import datetime, timedelta

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from fleet import kube
from fleet.models import Cluster
from queues.backends import backend_for, backend_named
from queues.manifests.protection import desired_class, protection_on
from queues.models import Job, JobCheckpoint, JobPod, JobPreemption, PriorityTier
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


# The convention for a job that saves to its checkpoint volume and reports it without the API: a
# line of its log with "QM_CHECKPOINT step=<n>" (and " path=<where>"), read with the log's own
# timestamps, the newest within the last LOG_TAIL lines of its first running pod.
MARKER_RE = re.compile(r"QM_CHECKPOINT step=(\d+)(?: path=(\S+))?")
LOG_TAIL = 200


def _last_marker(text: str) -> tuple[datetime, int, str] | None:
    for line in reversed(text.splitlines()):
        found = MARKER_RE.search(line)
        stamp, _, _ = line.partition(" ")
        # Kubernetes stamps to the nanosecond; Python reads microseconds.
        at = parse_datetime(re.sub(r"(\.\d{6})\d+", r"\1", stamp)) if found else None
        if found and at is not None:
            return at, int(found.group(1)), found.group(2) or ""
    return None


def checkpoints_from_logs(*, job_ids=None) -> int:
    """Record the checkpoints running jobs with a checkpoint volume announced in their logs
    (MARKER_RE) since the portal last looked; each marker once (by its step). Only while
    protection is on: the log is read for nothing else. Returns how many were recorded."""
    if not protection_on(PriorityTier.objects.all()):
        return 0
    jobs = (
        Job.objects.filter(state=S.RUNNING, cluster__scheduler__in=_protected_schedulers())
        .exclude(checkpoint_volume="")
        .select_related("cluster", "team", "tier")
    )
    if job_ids is not None:
        jobs = jobs.filter(pk__in=list(job_ids))
    recorded = 0
    for job in jobs:
        pod = JobPod.objects.filter(job=job, phase="Running").order_by("name").first()
        if pod is None:
            continue
        try:
            text = kube.client_for(job.cluster).pod_log(
                pod.namespace, pod.name, tail=LOG_TAIL, timestamps=True
            )
        except kube.KubeError as exc:
            log.info("checkpoint markers of job %s not read: %s", job.pk, exc)
            continue
        marker = _last_marker(text)
        if marker is None:
            continue
        at, step, path = marker
        if JobCheckpoint.objects.filter(
            job=job, step=step, source=JobCheckpoint.Source.LOG
        ).exists():
            continue
        try:
            checkpoint_report(job=job, actor=None, step=step, path=path[:500],
                              source=JobCheckpoint.Source.LOG, at=at)  # fmt: skip
        except ValidationError:  # it ended meanwhile
            continue
        recorded += 1
    return recorded


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
