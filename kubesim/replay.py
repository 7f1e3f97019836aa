"""Replaying a job history through kubesim's Kueue engine on a simulated clock, in-process.

The portal's what-if simulator hands in ClusterQueues and LocalQueues (rendered as for a real
cluster), each pool's GPU count, and the jobs as they happened (submission time, size,
priority, how long they ran, when they were cancelled). The replay runs the same engine the
simulated cluster runs (quota, borrowing, cohorts, preemption, queueing order), with no store
writes and no HTTP, and a small pod layer on top: an admitted job's pods start once its pool
has the GPUs free (the pods of admitted jobs start in admission order, a later one when it fits:
the scheduler tries every pending pod), and a job whose workload is preempted loses its pods and
starts its run over when admitted again (no checkpoints).

Times are seconds from the start of the replay. Each job gets back when it was admitted and
started (None when it never did), when it ended, and how often it was preempted.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from datetime import UTC, datetime

from kubesim.kueue import ADMITTED, PENDING, WL, KueueEngine, PodSet
from kubesim.store import Store


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


class _Clock:
    def __init__(self, origin: float):
        self.origin = origin
        self.t = 0.0

    def timestamp(self) -> float:
        return self.origin + self.t


class _ReplayEngine(KueueEngine):
    """The engine without its store side effects; admissions and evictions are reported."""

    def __init__(self, clock: _Clock):
        super().__init__(Store(system_namespaces=False), clock=clock)
        self.on_admit = self.on_evict = None

    def _write_status(self, wl, mutate) -> None:  # no Workload objects: nothing to write
        return

    def _event(self, *args, **kwargs) -> None:
        return

    def _start_job(self, wl) -> None:
        return

    def _stop_job(self, wl) -> None:
        return

    def _admit(self, wl, cq, assignment) -> None:
        super()._admit(wl, cq, assignment)
        self.on_admit(wl)

    def _evict(self, wl, reason, message, **kwargs) -> None:
        super()._evict(wl, reason, message, **kwargs)
        self.on_evict(wl)


def replay(
    *,
    cluster_queues: list[dict],
    local_queues: list[dict],
    pools: dict[str, int],
    jobs: list[ReplayJob],
    horizon: float,
    origin: datetime | None = None,
) -> ReplayResult:
    """Run the jobs through the engine until `horizon` seconds; jobs still running are cut
    there (their GPU-seconds count up to it)."""
    clock = _Clock((origin or datetime(2020, 1, 1, tzinfo=UTC)).timestamp())
    engine = _ReplayEngine(clock)
    engine.flavors = {name: {"metadata": {"name": name}, "spec": {}} for name in pools}
    engine.cq_objs = {obj["metadata"]["name"]: obj for obj in cluster_queues}
    engine.lqs = {(lq["metadata"]["namespace"], lq["metadata"]["name"]): lq for lq in local_queues}
    engine.rebuild()
    by_name = {job.key: job for job in jobs}
    free = dict(pools)
    busy = dict.fromkeys(pools, 0.0)
    waiting_pods: list[str] = []  # admitted, pods not started (admission order)
    running_since: dict[str, float] = {}
    generation: dict[str, int] = {}  # a finish event is stale once the job restarted
    events: list[tuple[float, int, str, str, int]] = []  # (time, order, kind, key, generation)
    seq = 0

    def push(at: float, kind: str, key: str, gen: int = 0) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(events, (at, seq, kind, key, gen))

    for job in jobs:
        push(job.submit, "submit", job.key)
        if job.cancel is not None:
            push(job.cancel, "cancel", job.key)

    def stop_pods(job: ReplayJob, now: float) -> None:
        if job.key in running_since:
            ran = now - running_since.pop(job.key)
            job.gpu_seconds += ran * job.gpus
            busy[job.pool] += ran * job.gpus
            free[job.pool] += job.gpus
        elif job.key in waiting_pods:
            waiting_pods.remove(job.key)
        generation[job.key] = generation.get(job.key, 0) + 1

    def on_admit(wl: WL) -> None:
        job = by_name[wl.name]
        if job.admitted is None:
            job.admitted = clock.t
        waiting_pods.append(job.key)

    def on_evict(wl: WL) -> None:
        job = by_name[wl.name]
        job.preempted += 1
        stop_pods(job, clock.t)

    engine.on_admit, engine.on_evict = on_admit, on_evict

    def start_pods(now: float) -> None:
        for key in list(waiting_pods):
            job = by_name[key]
            if free.get(job.pool, 0) >= job.gpus:
                free[job.pool] -= job.gpus
                waiting_pods.remove(key)
                running_since[key] = now
                if job.started is None:
                    job.started = now
                push(now + job.runtime, "finish", key, generation.get(key, 0))

    def end(job: ReplayJob, now: float) -> None:
        wl = engine.workloads.get((job.namespace, job.key))
        stop_pods(job, now)
        job.ended = now
        if wl is not None and wl.state in (ADMITTED, PENDING):
            engine._finish(wl, True, "")

    while events and events[0][0] <= horizon:
        now = events[0][0]
        clock.t = now
        while events and events[0][0] == now:
            _, _, kind, key, gen = heapq.heappop(events)
            job = by_name[key]
            if kind == "submit":
                if job.ended is not None:
                    continue
                podset = PodSet("main", job.workers, {job.resource: job.gpus_per_worker}, {})
                wl = WL(
                    ns=job.namespace, name=job.key, uid=job.key, queue=job.queue,
                    priority=job.priority, created=f"{job.submit:020.3f}",
                    seq=len(engine.workloads), podsets=[podset],
                )  # fmt: skip
                engine.workloads[wl.key] = wl
                engine._enqueue(wl)
            elif kind == "finish":
                if gen == generation.get(key, 0) and key in running_since and job.ended is None:
                    end(job, now)
            elif kind == "cancel" and job.ended is None:
                end(job, now)
        engine.schedule()
        start_pods(now)
    for key in list(running_since):
        stop_pods(by_name[key], horizon)
    return ReplayResult(
        jobs=jobs,
        horizon=horizon,
        busy_gpu_seconds=busy,
        admissions=engine.admissions,
        preemptions=engine.preemptions,
    )
