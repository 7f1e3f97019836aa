"""The recorded history as the replay takes it: the window's jobs, how long each held its quota (its
stretches of pods), when it arrived and left, and what member queues remembered when it opened."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

from django.db.models import Q

from fleet.models import Cluster
from kueuemodel.afs import AfsConfig
from kueuemodel.replay import ReplayJob
from queues.manifests.quotas import (
    local_queue_name,
    member_queue_name,
)
from queues.models import (
    Job,
)

S = Job.State

# -- the replay -----------------------------------------------------------------------------------


def window_jobs(*, start: datetime, end: datetime) -> list[Job]:
    """The jobs submitted in the window, and those submitted before it that had not ended when
    it opened (their `carried` set: they hold or wait for quota, but their waits are not the
    window's)."""
    jobs = list(
        Job.objects.filter(
            Q(submitted_at__gte=start)
            | Q(finished_at__gt=start)
            | (Q(finished_at__isnull=True) & ~Q(state__in=Job.FINAL_STATES)),
            submitted_at__lt=end,
            cluster__scheduler=Cluster.Scheduler.KUEUE,
        )  # fmt: skip
        .exclude(state__in=(S.DRAFT, S.PENDING_APPROVAL, S.REJECTED))
        .exclude(Q(state=S.FAILED) & Q(started_at__isnull=True) & Q(admitted_at__isnull=True))
        .select_related("team", "team__department", "pool", "admitted_pool", "tier", "owner")
        .only(
            "id",
            "team",
            "owner__username",
            "pool",
            "admitted_pool",
            "tier",
            "workers",
            "gpus_per_worker",
            "submitted_at",
            "queued_at",
            "admitted_at",
            "started_at",
            "finished_at",
            "state",
            "cluster_id",
            "expected_runtime_seconds",
            "max_runtime_seconds",
            "checkpoint_volume",
            "k8s_name",
        )  # fmt: skip
        .order_by("submitted_at", "pk")
    )
    for job in jobs:
        job.carried = job.submitted_at < start
    return jobs


# A pod that ended so did not leave its workload's quota: the Job runs the worker again (a
# failure within its retry limit), or the node was taken back (spot) and a new worker waits for
# room. What follows it belongs to the same admission, however long the gap.
KEPT_QUOTA = ("Failed",)


def quota_stretches(jobs: list[Job]) -> dict[int, list[list]]:
    """Per job from its recorded pods: the stretches it held its quota, [start, end or None
    (still running)], one per admission. Pods that overlap, follow at once, or follow a pod
    that failed or was interrupted belong to one stretch; a gap after a pod that was stopped
    (Deleted: a preemption) starts another. A preempted job's earlier stretches tell how far
    it had got, the last one how long its final run took (not finish − first start, which
    counts the waits between)."""
    from queues.models import JobPod

    pods: dict[int, list] = defaultdict(list)
    ids = [j.pk for j in jobs if j.started_at]
    for chunk in range(0, len(ids), 5000):
        rows = JobPod.objects.filter(job_id__in=ids[chunk:chunk + 5000],
                                     started_at__isnull=False)  # fmt: skip
        for row in rows.values_list("job_id", "started_at", "finished_at", "phase",
                                    "interrupted"):  # fmt: skip
            pods[row[0]].append(row[1:])
    out: dict[int, list[list]] = {}
    for job_id, rows in pods.items():
        stretches: list[list] = []
        kept = False  # the stretch's last pod to end left the quota held
        for started, finished, phase, interrupted in sorted(rows, key=lambda r: r[0]):
            last = stretches[-1] if stretches else None
            if last is not None and (last[1] is None or started <= last[1] or kept):
                if last[1] is not None and (finished is None or finished >= last[1]):
                    last[1] = finished
                    kept = phase in KEPT_QUOTA or interrupted
                continue
            stretches.append([started, finished])
            kept = phase in KEPT_QUOTA or interrupted
        out[job_id] = stretches
    return out


def left_queue(job: Job) -> datetime | None:
    """When a job that never started left the queue: cancelled while waiting, or admitted and
    failed before its pods ran (it held its quota from admission); None while it waits."""
    if job.started_at or not job.finished_at:
        return None
    return job.admitted_at if job.state == S.FAILED and job.admitted_at else job.finished_at


def replay_jobs(
    jobs: list[Job], *, start, end, tier_values: dict, shared: set[int]
) -> list[tuple[Job, ReplayJob]]:
    """The jobs as the replay takes them; those of the teams in `shared` (member fair
    sharing) wait in their owner's own LocalQueue, the others in their team's. Each arrives
    when it was created in the cluster (Kueue saw it then), and runs as long as its last
    stretch held its quota (its retries included), or, writing checkpoints, as long as all its
    stretches together."""
    out = []
    stretches = quota_stretches(jobs)
    for job in jobs:
        pool = job.admitted_pool or job.pool
        if pool is None:
            continue
        arrived = max(job.submitted_at, job.queued_at or job.submitted_at)
        submit = max(0.0, (arrived - start).total_seconds())
        cancel = None
        held = stretches.get(job.pk) or ([[job.started_at, job.finished_at]] if job.started_at
                                         else [])  # fmt: skip
        # Carried over: running when the window opened if a stretch covers its start (a job
        # preempted before it and waiting then queues at the start instead).
        covering = next((s for s in held if s[0] < start and (s[1] is None or s[1] > start)),
                        None) if job.carried else None  # fmt: skip
        running_at_start = covering is not None
        if running_at_start:  # what was left of its run when the window opened
            until = covering[1] or job.finished_at or end
            runtime = (until - start).total_seconds()
        elif held:
            since = held[-1][0]
            if job.finished_at:  # its final run, to the end
                runtime = (job.finished_at - since).total_seconds()
                if job.checkpoint_volume:  # and the work its checkpoints kept, in the window
                    runtime += sum(((b or end) - max(a, start)).total_seconds()
                                   for a, b in held[:-1] if (b or end) > start)  # fmt: skip
            elif job.state in (S.ADMITTED, S.RUNNING):  # still running: at least so far
                runtime = max((end - since).total_seconds(), job.expected_runtime_seconds or 0)
            else:  # preempted and waiting again: it needs a whole run
                runtime = float(job.expected_runtime_seconds or job.max_runtime_seconds)
        elif (left := left_queue(job)) is not None and job.state == S.FAILED:
            runtime = (job.finished_at - left).total_seconds()
        else:
            runtime = float(job.expected_runtime_seconds or job.max_runtime_seconds)
        if job.state == S.CANCELLED and job.finished_at:  # waiting or running, it stopped then
            cancel = (job.finished_at - start).total_seconds()
        out.append((job, ReplayJob(
            key=f"j{job.pk}", namespace=job.team.namespace,
            queue=(member_queue_name(job.team, job.owner) if job.team_id in shared
                   else local_queue_name(job.team)),
            pool=pool.name, resource=pool.gpu_resource, workers=job.workers,
            gpus_per_worker=job.gpus_per_worker,
            priority=tier_values.get(job.tier_id, job.tier.value), submit=submit,
            runtime=max(1.0, runtime), cancel=cancel, running_at_start=running_at_start,
            checkpointed=bool(job.checkpoint_volume), name=job.k8s_name,
        )))  # fmt: skip
    return out


def member_memory(*, cluster, team_ids, start, config: AfsConfig) -> dict[tuple, float]:
    """The GPUs each member's LocalQueue of the teams `team_ids` had consumed, as Kueue's
    admission fair sharing remembers it, when the window opened: its jobs' recorded stretches
    on the cluster over the six half-lives before, sampled every sampling interval (what the
    queue holds pulls its memory toward it by 1 - 0.5^(interval / half-life)), each admission
    adding its entry penalty. {(namespace, LocalQueue): GPUs}."""
    since = start - timedelta(seconds=6 * config.half_life)
    jobs = list(Job.objects.filter(team_id__in=team_ids, cluster=cluster, started_at__lt=start)
                .filter(Q(finished_at__gt=since) | Q(finished_at__isnull=True))
                .select_related("team", "owner"))  # fmt: skip
    events = []  # (time, GPUs held from then on, LocalQueue, is an admission)
    stretches = quota_stretches(jobs)
    for job in jobs:
        key = (job.team.namespace, member_queue_name(job.team, job.owner))
        gpus = job.workers * job.gpus_per_worker
        for began, ended in stretches.get(job.pk) or []:
            events.append(((began - since).total_seconds(), gpus, key, True))
            if ended is not None:
                events.append(((ended - since).total_seconds(), -gpus, key, False))
    events.sort(key=lambda e: e[0])
    consumed: dict[tuple, float] = defaultdict(float)
    held: dict[tuple, float] = defaultdict(float)
    alpha = config.alpha(config.sampling)
    t, i, until = 0.0, 0, (start - since).total_seconds()
    while t < until:
        while i < len(events) and events[i][0] <= t:
            _, gpus, key, admission = events[i]
            held[key] += gpus
            if admission:
                consumed[key] += alpha * gpus
            i += 1
        for key in set(consumed) | set(held):
            consumed[key] = (1 - alpha) * consumed[key] + alpha * max(0.0, held[key])
        t += config.sampling
    return dict(consumed)
