"""Replaying a job history through the model on a simulated clock, in-process.

The portal's what-if simulator hands in ClusterQueues and LocalQueues (rendered as for a real
cluster), each pool's nodes and their GPUs, and the jobs as they happened (submission time, size,
priority, how long they ran, when they were cancelled). The replay drives the same model
kubesim's Kueue controller drives (quota, borrowing, cohorts, preemption, queueing order), with
its own listener (no statuses, no events) and, for speed, the Buckets strategy
(kueuemodel.replay.buckets), and a small pod layer on top: an admitted job's pods start once a
node of its pool has the GPUs free (the pods of admitted jobs are tried in admission order, a
later one starts when it fits; each worker goes to the node with the fewest free GPUs that fit
it, as kubesim's scheduler binds, so a pool fragmented by small jobs keeps a large one waiting),
and a job whose workload is preempted loses its pods and starts its run over when admitted again
(the workers that had finished stay finished, as an Indexed Job keeps its completed indexes),
unless it writes checkpoints: then it goes on from where all its workers had got to. Jobs
already running when the replay starts are admitted at its start (see
ReplayJob.running_at_start).

Each instant goes through the rounds of kubesim's controllers (see replay()): what Kueue admits
on a submission and what it admits when a job ends, when a victim's GPUs come free and when the
new pods are bound follow the order in which Kueue, the Job controller, the scheduler and the
kubelet see each other's writes. A replay of the cluster's own history therefore starts and ends
every job when the cluster did (tests/kubesim/test_replay_matches_controllers.py).

Times are seconds from the start of the replay. Each job gets back when it was admitted and
started (None when it never did), when it ended, and how often it was preempted.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime

from kueuemodel.afs import AfsConfig
from kueuemodel.model import Listener, Model
from kueuemodel.queue import OneByOne
from kueuemodel.replay.buckets import Buckets
from kueuemodel.types import ADMITTED, PENDING, WL, PodSet

POOL = "replay.kubesim.io/pool"  # the node label that tells the pools' flavors apart

# The model a replay drives, looked up when replay() runs (so that a test can watch the one it
# built).
ReplayEngine = Model


class ReplayClock:
    """The simulated clock: seconds `t` from `origin` (a UNIX time)."""

    def __init__(self, origin: float):
        self.origin = origin
        self.t = 0.0

    def timestamp(self) -> float:
        return self.origin + self.t


class _Callbacks(Listener):
    """The replay's listener: what the model admits and evicts moves the pods."""

    def __init__(self, on_admit, on_evict):
        self.on_admit, self.on_evict = on_admit, on_evict

    def admitted(self, wl: WL, cq) -> None:
        self.on_admit(wl)

    def evicted(self, wl: WL, reason, message, *, requeue, preempted_reason) -> None:
        self.on_evict(wl, preempted_reason or reason or "")


class PodTrace:
    """What a replay's caller may hear of its jobs and pods (a history recorder; nobody
    listens by default): `job` admitted at `t`, or preempted at `t` for Kueue's `reason`
    (InClusterQueue, InCohortReclamation, ...); a pod of `job` started on node `node` (its
    index in the pool's nodes) at `t`, and stopped there at `t`, `why` being "succeeded" (it
    ran its course), "preempted" (its workload was evicted), "cancelled" or "horizon" (still
    running when the replay ends)."""

    def job_admitted(self, job: ReplayJob, t: float) -> None:
        pass

    def job_preempted(self, job: ReplayJob, t: float, reason: str) -> None:
        pass

    def pod_started(self, job: ReplayJob, node: int, t: float) -> None:
        pass

    def pod_stopped(self, job: ReplayJob, node: int, t: float, why: str) -> None:
        pass


@dataclass
class ReplayJob:
    key: str  # unique; used as the workload name
    namespace: str
    queue: str  # LocalQueue name
    pool: str  # flavor (pool) name
    resource: str  # the GPU resource, e.g. nvidia.com/gpu
    workers: int
    gpus_per_worker: int
    priority: int
    submit: float
    runtime: float  # seconds it runs once started
    cancel: float | None = None  # when it was cancelled (it leaves the queue, or stops)
    # Already running when the replay starts: admitted at 0 whatever the quota says (Kueue does
    # not evict what it admitted when quota shrinks); `runtime` is then what was left of it.
    running_at_start: bool = False
    # Writes checkpoints: preempted, it starts again from where its workers all got to.
    checkpointed: bool = False
    name: str = ""  # its Job's name (the scheduler binds pods created in one second by name)
    # results
    admitted: float | None = None
    started: float | None = None
    ended: float | None = None
    preempted: int = 0
    gpu_seconds: float = 0.0  # GPU-seconds its pods ran (restarts included)

    @property
    def gpus(self) -> int:
        return self.workers * self.gpus_per_worker


@dataclass
class ReplayResult:
    jobs: list[ReplayJob]
    horizon: float
    busy_gpu_seconds: dict[str, float] = field(default_factory=dict)  # per pool
    admissions: int = 0
    preemptions: int = 0


def _timestamp(text: str) -> float:
    """A UNIX time from an RFC 3339 time ("2026-11-01T10:00:00Z")."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _nodes(size) -> list[int]:
    """A pool's nodes as GPU counts: a list as given, a bare number as one node of that size."""
    if isinstance(size, int):
        return [size] if size > 0 else []
    return [int(n) for n in size if int(n) > 0]


def replay(
    *,
    cluster_queues: list[dict],
    local_queues: list[dict],
    pools: dict[str, int | list[int]],
    cohorts: list[dict] = (),
    jobs: list[ReplayJob],
    horizon: float,
    origin: datetime | None = None,
    fair_sharing: bool = False,
    admission_fair_sharing: AfsConfig | None = None,
    shortcut: bool = True,
    trace: PodTrace | None = None,
    queue_changes: list[tuple[float, dict]] = (),
) -> ReplayResult:
    """Run the jobs through the model until `horizon` seconds; jobs still running are cut
    there (their GPU-seconds count up to it).

    `pools` gives each pool's nodes (their GPU counts, in node-name order) or its size as one
    number (one node). Pods are placed as kubesim's scheduler places them: each worker on its
    own, on the node with the fewest free GPUs that fit it (ties to the first node), pending pods
    in the order they were created (their job's admission). `fair_sharing` runs the model as
    Kueue with fair sharing enabled, `admission_fair_sharing` with that configuration (the
    LocalQueues' usage memory starts empty, or as a LocalQueue's
    `status.fairSharing.admissionFairSharingStatus` says). `shortcut` passes over workloads that
    cannot be admitted because one alike, no larger and of no lower priority just could not
    (the same result in less time: the model takes the Buckets strategy, kueuemodel.replay.buckets;
    without it, OneByOne, as kubesim's Kueue controller). `cohorts` are Cohort objects (a
    parent, quota, a fair-sharing weight); the queues' cohorts not among them have none.
    `trace` hears each pod start and stop (see PodTrace). `queue_changes`: (t, ClusterQueue)
    pairs, each replacing the ClusterQueue of its name at `t` (as an update of its spec reaches
    Kueue: what is admitted stays admitted, the next cycle sees the new quota), e.g. the
    lending limit and nominal quota an advance reservation changes for its window."""
    trace = trace or PodTrace()
    clock = ReplayClock((origin or datetime(2020, 1, 1, tzinfo=UTC)).timestamp())
    engine = ReplayEngine(
        clock=clock, fair_sharing=fair_sharing, admission_fair_sharing=admission_fair_sharing,
        strategy=Buckets if shortcut else OneByOne,
    )  # fmt: skip
    # Each job selects its own pool, as its pods' node selector selects the pool's flavor.
    engine.flavors = {name: {"metadata": {"name": name}, "spec": {"nodeLabels": {POOL: name}}}
                      for name in pools}  # fmt: skip
    engine.cq_objs = {obj["metadata"]["name"]: obj for obj in cluster_queues}
    engine.cohort_objs = {obj["metadata"]["name"]: obj for obj in cohorts}
    engine.lqs = {(lq["metadata"]["namespace"], lq["metadata"]["name"]): lq for lq in local_queues}
    engine.rebuild()
    if engine.ledger is not None:  # what each LocalQueue had consumed before (its status says)
        for key, lq in engine.lqs.items():
            if (lq.get("status") or {}).get("fairSharing"):
                engine.ledger.seed(key, lq["status"], clock.timestamp(), _timestamp)
    by_name = {job.key: job for job in jobs}
    free = {name: _nodes(size) for name, size in pools.items()}  # free GPUs per node
    busy = dict.fromkeys(pools, 0.0)
    # Admitted jobs whose pods are not all placed, in pod creation order: key -> (admitted, n).
    waiting: dict[str, tuple[float, int]] = {}
    pending_pods: dict[str, int] = {}  # key -> workers not yet placed
    running: dict[str, list[tuple[int, float]]] = {}  # key -> [(node, since)] of running pods
    done_pods: dict[str, int] = {}  # key -> workers finished (kept when it is preempted)
    progress: dict[str, float] = {}  # key -> seconds of its run a checkpointed job has done
    generation: dict[str, int] = {}  # a finish event is stale once the job restarted
    events: list[tuple[float, int, str, str, int]] = []  # (time, order, kind, key, generation)
    seq = 0
    admissions = 0

    def push(at: float, kind: str, key: str, gen: int = 0) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(events, (at, seq, kind, key, gen))

    changes = {}
    for i, (at, obj) in enumerate(sorted(queue_changes, key=lambda change: change[0])):
        changes[f"queue-change-{i}"] = obj
        push(at, "queue", f"queue-change-{i}")
    for job in jobs:
        push(job.submit, "submit", job.key)
        if job.cancel is not None:
            push(job.cancel, "cancel", job.key)

    # One instant runs as kubesim's controllers run it, in rounds. Each round hands on the
    # last round's writes, then Kueue, the Job controller (for the jobs those writes touched),
    # the scheduler and the kubelet act in turn:
    #   0  Kueue admits what was submitted now. The Job controller makes the pods of the new
    #      jobs it admitted (it reads them new). The kubelet ends the pods due now.
    #   1  Their GPUs are free, and the scheduler binds those new pods. The Job controller
    #      makes the pods of round 0's other admissions, deletes its victims' pods and marks
    #      complete the jobs whose pods all ended.
    #   2  Kueue admits with the quota of those jobs. It may evict a job whose pod was bound in
    #      round 1 before the kubelet started it: the Job controller, called by that binding,
    #      deletes the pod in this round, so it never ran. The scheduler binds round 1's pods
    #      with round 0's victims' GPUs free.
    #   3  The GPUs of round 2's victims that the Job controller saw in round 2 are free.
    #   4  The pods of round 2's admissions are bound, with the other victims' GPUs free.
    # `stage` is the round now. The pods of a job admitted in it are bound from round
    # `ready[job]`. Evicted pods' GPUs are free from the round beside them in `terminating`.
    # `touched`: the jobs the Job controller reconciles in round 2.
    stage = 0
    fresh: set[str] = set()  # submitted at this instant
    ready: dict[str, int] = {}
    touched: set[str] = set()
    bound_first: list[str] = []  # jobs whose pods were bound in round 1, started from round 2
    terminating: list[tuple[int, str, int, int]] = []  # (round, pool, node, GPUs)

    def stop_pods(job: ReplayJob, now: float, *, at_once: bool = True, why: str) -> None:
        nodes = free.get(job.pool, [])
        pods = running.get(job.key, [])
        if job.checkpointed and pods and len(pods) == job.workers - done_pods.get(job.key, 0):
            # Its workers checkpoint together: the run goes on from the least advanced one.
            progress[job.key] = progress.get(job.key, 0.0) + min(now - since for _, since in pods)
        for node, since in running.pop(job.key, []):
            trace.pod_stopped(job, node, now, why)
            ran = now - since
            job.gpu_seconds += ran * job.gpus_per_worker
            busy[job.pool] += ran * job.gpus_per_worker
            if at_once:
                nodes[node] += job.gpus_per_worker
            else:
                gone = stage + (1 if stage == 2 and job.key in touched else 2)
                terminating.append((gone, job.pool, node, job.gpus_per_worker))
        waiting.pop(job.key, None)
        pending_pods.pop(job.key, None)
        generation[job.key] = generation.get(job.key, 0) + 1

    # Evicted in this round: Kueue suspends the job, but if it admits it again in the same round
    # the Job controller reads it unsuspended and its pods go on as they were.
    evicted: dict[str, tuple[ReplayJob, str]] = {}

    def on_admit(wl: WL) -> None:
        nonlocal admissions
        job = by_name[wl.name]
        if job.admitted is None:
            job.admitted = clock.t
        admissions += 1
        if evicted.pop(job.key, None) is not None:
            return
        trace.job_admitted(job, clock.t)
        # kubesim's scheduler binds pending pods by creation time (to the second), then
        # namespace and name: its pods are created when the job is admitted.
        waiting[job.key] = (math.floor(clock.timestamp()), job.namespace, job.name or job.key,
                            admissions)  # fmt: skip
        ready[job.key] = 1 if stage == 0 and job.key in fresh else stage + 2
        if stage == 0 and job.key not in fresh:
            touched.add(job.key)
        # An Indexed Job keeps the indexes that completed: only the others run again.
        pending_pods[job.key] = job.workers - done_pods.setdefault(job.key, 0)

    def on_evict(wl: WL, reason: str) -> None:
        evicted[wl.name] = (by_name[wl.name], reason)

    def schedule() -> None:
        engine.schedule()
        for job, reason in evicted.values():
            job.preempted += 1
            trace.job_preempted(job, clock.t, reason)
            stop_pods(job, clock.t, at_once=False, why="preempted")
        evicted.clear()

    engine.listener = _Callbacks(on_admit, on_evict)

    def best_fit(nodes: list[int], gpus: int) -> int | None:
        best = None
        for i, left in enumerate(nodes):
            if left >= gpus and (best is None or left < nodes[best]):
                best = i
        return best

    def start_pods(now: float) -> None:
        for key in sorted(waiting, key=waiting.__getitem__):
            if ready.get(key, 0) > stage:
                continue
            job = by_name[key]
            nodes = free.get(job.pool, [])
            while pending_pods[key]:
                node = best_fit(nodes, job.gpus_per_worker)
                if node is None:
                    break
                nodes[node] -= job.gpus_per_worker
                pending_pods[key] -= 1
                running.setdefault(key, []).append((node, now))
                trace.pod_started(job, node, now)
                if stage == 1:
                    touched.add(key)
                    bound_first.append(key)
                elif job.started is None:
                    job.started = now
                left = max(1.0, job.runtime - progress.get(key, 0.0))
                push(now + left, "finish", key, generation.get(key, 0))
            if not pending_pods[key]:
                del waiting[key]

    def pod_finished(job: ReplayJob, now: float) -> None:
        """The longest-running pod of the job ends (they all run `runtime` from their start)."""
        pods = running[job.key]
        node, since = pods.pop(0)
        trace.pod_stopped(job, node, now, "succeeded")
        ran = now - since
        job.gpu_seconds += ran * job.gpus_per_worker
        busy[job.pool] += ran * job.gpus_per_worker
        free[job.pool][node] += job.gpus_per_worker
        done_pods[job.key] += 1
        if done_pods[job.key] == job.workers:
            end(job, now)

    def end(job: ReplayJob, now: float, why: str = "succeeded") -> None:
        wl = engine.workloads.get((job.namespace, job.key))
        stop_pods(job, now, why=why)
        done_pods.pop(job.key, None)
        job.ended = now
        if wl is not None and wl.state in (ADMITTED, PENDING):
            engine.finish(wl, True, "")

    def workload(job: ReplayJob) -> WL:
        podset = PodSet("main", job.workers, {job.resource: job.gpus_per_worker},
                        {"nodeSelector": {POOL: job.pool}})  # fmt: skip
        wl = WL(
            ns=job.namespace, name=job.key, uid=job.key, queue=job.queue,
            priority=job.priority, created=f"{max(0.0, job.submit):020.3f}",
            seq=len(engine.workloads), podsets=[podset],
        )  # fmt: skip
        engine.workloads[wl.key] = wl
        return wl

    for job in jobs:  # what ran when the window opened holds its quota from the start
        if job.running_at_start:
            wl = workload(job)
            cq, _ = engine.target(wl)
            if cq is not None:
                engine.admit(wl, cq, [{job.resource: job.pool}])
    ready.clear()  # their pods run from the start
    touched.clear()
    start_pods(0.0)

    def free_terminating() -> None:
        for gone, pool, node, gpus in terminating:
            if gone <= stage:
                free[pool][node] += gpus
        terminating[:] = [t for t in terminating if t[0] > stage]

    while events and events[0][0] <= horizon:
        now = events[0][0]
        clock.t = now
        ending = []
        while events and events[0][0] == now:
            _, _, kind, key, gen = heapq.heappop(events)
            if kind == "queue":  # before this instant's admissions, as a spec update would be
                engine.set_cluster_queue(changes[key]["metadata"]["name"], changes[key])
                continue
            job = by_name[key]
            if kind == "submit":
                if job.ended is not None or job.running_at_start:
                    continue
                engine.enqueue(workload(job))
                fresh.add(key)
            elif kind == "finish":
                ending.append((job, gen))
            elif kind == "cancel" and job.ended is None:
                end(job, now, "cancelled")
        stage = 0
        schedule()
        for job, gen in ending:  # a pod evicted in round 0 did not get to end
            if gen == generation.get(job.key, 0) and running.get(job.key) and job.ended is None:
                touched.add(job.key)
                pod_finished(job, now)
        for stage in (1, 2, 3, 4):
            free_terminating()
            if stage == 2:
                schedule()
                for key in bound_first:  # the kubelet starts those still there
                    if running.get(key) and by_name[key].started is None:
                        by_name[key].started = now
            start_pods(now)
        fresh.clear()
        ready.clear()
        touched.clear()
        bound_first.clear()
    for key in list(running):
        stop_pods(by_name[key], horizon, why="horizon")
    return ReplayResult(
        jobs=jobs,
        horizon=horizon,
        busy_gpu_seconds=busy,
        admissions=engine.admissions,
        preemptions=engine.preemptions,
    )
