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

Each instant goes through the rounds of kubesim's controllers (see _Run): what Kueue admits
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
    clock = ReplayClock((origin or datetime(2020, 1, 1, tzinfo=UTC)).timestamp())
    engine = ReplayEngine(
        clock=clock, fair_sharing=fair_sharing, admission_fair_sharing=admission_fair_sharing,
        strategy=Buckets if shortcut else OneByOne,
    )  # fmt: skip
    _load(engine, clock, pools, cluster_queues, cohorts, local_queues)
    run = _Run(engine, clock, jobs, pools, trace or PodTrace())
    run.plan(jobs, queue_changes)
    run.admit_running_at_start(jobs)
    run.until(horizon)
    return ReplayResult(
        jobs=jobs,
        horizon=horizon,
        busy_gpu_seconds=run.busy,
        admissions=engine.admissions,
        preemptions=engine.preemptions,
    )


def _load(engine: Model, clock: ReplayClock, pools, cluster_queues, cohorts, local_queues) -> None:
    """The model's objects: a flavor per pool (each job selects its own pool, as its pods' node
    selector selects the pool's flavor), the queues and cohorts, and what each LocalQueue had
    consumed before (as its status says) when admission fair sharing keeps a ledger."""
    engine.flavors = {name: {"metadata": {"name": name}, "spec": {"nodeLabels": {POOL: name}}}
                      for name in pools}  # fmt: skip
    engine.cq_objs = {obj["metadata"]["name"]: obj for obj in cluster_queues}
    engine.cohort_objs = {obj["metadata"]["name"]: obj for obj in cohorts}
    engine.lqs = {(lq["metadata"]["namespace"], lq["metadata"]["name"]): lq for lq in local_queues}
    engine.rebuild()
    if engine.ledger is not None:
        for key, lq in engine.lqs.items():
            if (lq.get("status") or {}).get("fairSharing"):
                engine.ledger.seed(key, lq["status"], clock.timestamp(), _timestamp)


def _best_fit(nodes: list[int], gpus: int) -> int | None:
    """The node with the fewest free GPUs that still fit `gpus` (ties to the first), if any."""
    best = None
    for i, left in enumerate(nodes):
        if left >= gpus and (best is None or left < nodes[best]):
            best = i
    return best


class _Run:
    """One replay: the events to come, the pods on the nodes, and the rounds of an instant.

    One instant runs as kubesim's controllers run it, in rounds. Each round hands on the last
    round's writes, then Kueue, the Job controller (for the jobs those writes touched), the
    scheduler and the kubelet act in turn:
      0  Kueue admits what was submitted now. The Job controller makes the pods of the new jobs
         it admitted (it reads them new). The kubelet ends the pods due now.
      1  Their GPUs are free, and the scheduler binds those new pods. The Job controller makes
         the pods of round 0's other admissions, deletes its victims' pods and marks complete
         the jobs whose pods all ended.
      2  Kueue admits with the quota of those jobs. It may evict a job whose pod was bound in
         round 1 before the kubelet started it: the Job controller, called by that binding,
         deletes the pod in this round, so it never ran. The scheduler binds round 1's pods
         with round 0's victims' GPUs free.
      3  The GPUs of round 2's victims that the Job controller saw in round 2 are free.
      4  The pods of round 2's admissions are bound, with the other victims' GPUs free.
    `stage` is the round now. The pods of a job admitted in it are bound from round
    `ready[job]`. Evicted pods' GPUs are free from the round beside them in `terminating`.
    `touched`: the jobs the Job controller reconciles in round 2."""

    def __init__(self, engine: Model, clock: ReplayClock, jobs: list[ReplayJob], pools, trace):
        self.engine, self.clock, self.trace = engine, clock, trace
        self.by_name = {job.key: job for job in jobs}
        self.free = {name: _nodes(size) for name, size in pools.items()}  # free GPUs per node
        self.busy = dict.fromkeys(pools, 0.0)
        # Admitted jobs whose pods are not all placed, in pod creation order.
        self.waiting: dict[str, tuple] = {}
        self.pending_pods: dict[str, int] = {}  # key -> workers not yet placed
        self.running: dict[str, list[tuple[int, float]]] = {}  # key -> [(node, since)]
        self.done_pods: dict[str, int] = {}  # key -> workers finished (kept when preempted)
        self.progress: dict[str, float] = {}  # key -> seconds a checkpointed job has done
        self.generation: dict[str, int] = {}  # a finish event is stale once the job restarted
        self.events: list[tuple[float, int, str, str, int]] = []  # (time, order, kind, key, gen)
        self.seq = 0
        self.admissions = 0
        self.changes: dict[str, dict] = {}  # queue-change key -> the ClusterQueue it sets
        self.stage = 0
        self.fresh: set[str] = set()  # submitted at this instant
        self.ready: dict[str, int] = {}
        self.touched: set[str] = set()
        self.bound_first: list[str] = []  # bound in round 1, started from round 2
        self.terminating: list[tuple[int, str, int, int]] = []  # (round, pool, node, GPUs)
        # Evicted in this round: Kueue suspends the job, but if it admits it again in the same
        # round the Job controller reads it unsuspended and its pods go on as they were.
        self.evicted: dict[str, tuple[ReplayJob, str]] = {}
        engine.listener = _Callbacks(self.on_admit, self.on_evict)

    # --- events ------------------------------------------------------------------------------

    def push(self, at: float, kind: str, key: str, gen: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.events, (at, self.seq, kind, key, gen))

    def plan(self, jobs: list[ReplayJob], queue_changes) -> None:
        """The events the inputs give: queue changes, submissions and cancellations."""
        for i, (at, obj) in enumerate(sorted(queue_changes, key=lambda change: change[0])):
            self.changes[f"queue-change-{i}"] = obj
            self.push(at, "queue", f"queue-change-{i}")
        for job in jobs:
            self.push(job.submit, "submit", job.key)
            if job.cancel is not None:
                self.push(job.cancel, "cancel", job.key)

    def admit_running_at_start(self, jobs: list[ReplayJob]) -> None:
        """What ran when the window opened holds its quota, and its pods run, from the start."""
        for job in jobs:
            if job.running_at_start:
                wl = self.workload(job)
                cq, _ = self.engine.target(wl)
                if cq is not None:
                    self.engine.admit(wl, cq, [{job.resource: job.pool}])
        self.ready.clear()
        self.touched.clear()
        self.start_pods(0.0)

    def until(self, horizon: float) -> None:
        """Every instant up to `horizon`; the pods still running are cut there."""
        while self.events and self.events[0][0] <= horizon:
            self.instant(self.events[0][0])
        for key in list(self.running):
            self.stop_pods(self.by_name[key], horizon, why="horizon")

    def instant(self, now: float) -> None:
        self.clock.t = now
        ending = self.take_events(now)
        self.stage = 0
        self.schedule()
        for job, gen in ending:  # a pod evicted in round 0 did not get to end
            current = gen == self.generation.get(job.key, 0)
            if current and self.running.get(job.key) and job.ended is None:
                self.touched.add(job.key)
                self.pod_finished(job, now)
        for stage in (1, 2, 3, 4):
            self.stage = stage
            self.free_terminating()
            if stage == 2:
                self.schedule()
                for key in self.bound_first:  # the kubelet starts those still there
                    if self.running.get(key) and self.by_name[key].started is None:
                        self.by_name[key].started = now
            self.start_pods(now)
        self.fresh.clear()
        self.ready.clear()
        self.touched.clear()
        self.bound_first.clear()

    def take_events(self, now: float) -> list[tuple[ReplayJob, int]]:
        """Apply this instant's queue changes, submissions and cancellations; returns the pods
        due to finish now, (job, generation), for round 0 to end."""
        ending = []
        while self.events and self.events[0][0] == now:
            _, _, kind, key, gen = heapq.heappop(self.events)
            if kind == "queue":  # before this instant's admissions, as a spec update would be
                obj = self.changes[key]
                self.engine.set_cluster_queue(obj["metadata"]["name"], obj)
                continue
            job = self.by_name[key]
            if kind == "submit":
                if job.ended is not None or job.running_at_start:
                    continue
                self.engine.enqueue(self.workload(job))
                self.fresh.add(key)
            elif kind == "finish":
                ending.append((job, gen))
            elif kind == "cancel" and job.ended is None:
                self.end(job, now, "cancelled")
        return ending

    # --- Kueue -------------------------------------------------------------------------------

    def workload(self, job: ReplayJob) -> WL:
        podset = PodSet("main", job.workers, {job.resource: job.gpus_per_worker},
                        {"nodeSelector": {POOL: job.pool}})  # fmt: skip
        wl = WL(
            ns=job.namespace, name=job.key, uid=job.key, queue=job.queue,
            priority=job.priority, created=f"{max(0.0, job.submit):020.3f}",
            seq=len(self.engine.workloads), podsets=[podset],
        )  # fmt: skip
        self.engine.workloads[wl.key] = wl
        return wl

    def schedule(self) -> None:
        self.engine.schedule()
        for job, reason in self.evicted.values():
            job.preempted += 1
            self.trace.job_preempted(job, self.clock.t, reason)
            self.stop_pods(job, self.clock.t, at_once=False, why="preempted")
        self.evicted.clear()

    def on_admit(self, wl: WL) -> None:
        job = self.by_name[wl.name]
        if job.admitted is None:
            job.admitted = self.clock.t
        self.admissions += 1
        if self.evicted.pop(job.key, None) is not None:
            return
        self.trace.job_admitted(job, self.clock.t)
        # kubesim's scheduler binds pending pods by creation time (to the second), then
        # namespace and name: its pods are created when the job is admitted.
        self.waiting[job.key] = (math.floor(self.clock.timestamp()), job.namespace,
                                 job.name or job.key, self.admissions)  # fmt: skip
        fresh = self.stage == 0 and job.key in self.fresh
        self.ready[job.key] = 1 if fresh else self.stage + 2
        if self.stage == 0 and not fresh:
            self.touched.add(job.key)
        # An Indexed Job keeps the indexes that completed: only the others run again.
        self.pending_pods[job.key] = job.workers - self.done_pods.setdefault(job.key, 0)

    def on_evict(self, wl: WL, reason: str) -> None:
        self.evicted[wl.name] = (self.by_name[wl.name], reason)

    # --- pods --------------------------------------------------------------------------------

    def start_pods(self, now: float) -> None:
        for key in sorted(self.waiting, key=self.waiting.__getitem__):
            if self.ready.get(key, 0) > self.stage:
                continue
            job = self.by_name[key]
            nodes = self.free.get(job.pool, [])
            while self.pending_pods[key]:
                node = _best_fit(nodes, job.gpus_per_worker)
                if node is None:
                    break
                nodes[node] -= job.gpus_per_worker
                self.pending_pods[key] -= 1
                self.running.setdefault(key, []).append((node, now))
                self.trace.pod_started(job, node, now)
                if self.stage == 1:
                    self.touched.add(key)
                    self.bound_first.append(key)
                elif job.started is None:
                    job.started = now
                left = max(1.0, job.runtime - self.progress.get(key, 0.0))
                self.push(now + left, "finish", key, self.generation.get(key, 0))
            if not self.pending_pods[key]:
                del self.waiting[key]

    def stop_pods(self, job: ReplayJob, now: float, *, at_once: bool = True, why: str) -> None:
        nodes = self.free.get(job.pool, [])
        pods = self.running.get(job.key, [])
        if job.checkpointed and pods and len(pods) == job.workers - self.done_pods.get(job.key, 0):
            # Its workers checkpoint together: the run goes on from the least advanced one.
            ran = min(now - since for _, since in pods)
            self.progress[job.key] = self.progress.get(job.key, 0.0) + ran
        for node, since in self.running.pop(job.key, []):
            self.trace.pod_stopped(job, node, now, why)
            self._count(job, now - since)
            if at_once:
                nodes[node] += job.gpus_per_worker
            else:
                gone = self.stage + (1 if self.stage == 2 and job.key in self.touched else 2)
                self.terminating.append((gone, job.pool, node, job.gpus_per_worker))
        self.waiting.pop(job.key, None)
        self.pending_pods.pop(job.key, None)
        self.generation[job.key] = self.generation.get(job.key, 0) + 1

    def pod_finished(self, job: ReplayJob, now: float) -> None:
        """The longest-running pod of the job ends (they all run `runtime` from their start)."""
        node, since = self.running[job.key].pop(0)
        self.trace.pod_stopped(job, node, now, "succeeded")
        self._count(job, now - since)
        self.free[job.pool][node] += job.gpus_per_worker
        self.done_pods[job.key] += 1
        if self.done_pods[job.key] == job.workers:
            self.end(job, now)

    def _count(self, job: ReplayJob, ran: float) -> None:
        job.gpu_seconds += ran * job.gpus_per_worker
        self.busy[job.pool] += ran * job.gpus_per_worker

    def end(self, job: ReplayJob, now: float, why: str = "succeeded") -> None:
        wl = self.engine.workloads.get((job.namespace, job.key))
        self.stop_pods(job, now, why=why)
        self.done_pods.pop(job.key, None)
        job.ended = now
        if wl is not None and wl.state in (ADMITTED, PENDING):
            self.engine.finish(wl, True, "")

    def free_terminating(self) -> None:
        for gone, pool, node, gpus in self.terminating:
            if gone <= self.stage:
                self.free[pool][node] += gpus
        self.terminating[:] = [t for t in self.terminating if t[0] > self.stage]
