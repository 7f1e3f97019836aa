"""The replay against the simulated cluster itself: the same jobs, run once through kubesim's full
controller set (Kueue, the Job controller, the scheduler, the kubelet) on a discrete-event clock
and once through kubesim.replay, start and end at the same moments, preemptions included.

This is what makes a what-if's waits those the cluster would have had. The histories are random
(seeded) and crowded, so that jobs are preempted, re-admitted, wait for room on a node, and
several things happen at one instant."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest

from kubesim import resources as R
from kubesim.clock import Clock
from kubesim.controllers import Controllers
from kubesim.fleet import load_fleet
from kubesim.kubelet import EXPECTED_RUNTIME_ANNOTATION
from kubesim.store import Store
from kueuemodel.afs import AfsConfig
from kueuemodel.replay import ReplayJob, replay

GPU = "nvidia.com/gpu"
POOL_LABEL = "example.com/pool"
ORIGIN = 1_700_000_000.0
# name -> (nodes, GPUs per node)
POOLS = {"big": (2, 8), "small": (2, 4)}
# team -> (nominal GPUs per pool, borrowing limit or None)
TEAMS = {"team-a": (6, None), "team-b": (4, 4), "team-c": (2, None)}
PRIORITIES = {"low": 10, "mid": 100, "high": 1000}
SIZES = ((1, 1), (1, 1), (1, 2), (1, 4), (1, 8), (2, 2), (2, 4))  # (workers, GPUs per worker)


def _cluster_queue(team: str, fair_weight: str | None, *, members: bool = False) -> dict:
    nominal, borrowing = TEAMS[team]
    resources = {"name": GPU, "nominalQuota": nominal}
    if borrowing is not None:
        resources["borrowingLimit"] = borrowing
    spec = {
        "namespaceSelector": {},
        "cohortName": "dept",
        "resourceGroups": [{"coveredResources": [GPU], "flavors": [
            {"name": pool, "resources": [dict(resources)]} for pool in POOLS]}],
        "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority",
                       "borrowWithinCohort": {"policy": "LowerPriority"}},
    }  # fmt: skip
    if fair_weight is not None:
        spec["fairSharing"] = {"weight": fair_weight}
    if members:  # its LocalQueues take turns by their decayed usage
        spec["admissionScope"] = {"admissionMode": "UsageBasedAdmissionFairSharing"}
    return {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue",
            "metadata": {"name": team}, "spec": spec}  # fmt: skip


def _local_queue(team: str, name: str = "main") -> dict:
    return {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
            "metadata": {"name": name, "namespace": team},
            "spec": {"clusterQueue": team}}  # fmt: skip


def _history(seed: int, count: int, queues=("main",)) -> list[ReplayJob]:
    """Jobs over about two hours, more than the fleet can run at once."""
    rng = random.Random(seed)
    jobs = []
    for i in range(count):
        workers, gpus = rng.choice(SIZES)
        pool = "big" if gpus == 8 or rng.random() < 0.6 else "small"
        team = rng.choice(list(TEAMS))
        jobs.append(ReplayJob(
            key=f"job-{i}", name=f"job-{i}", namespace=team, queue=rng.choice(queues), pool=pool,
            resource=GPU, workers=workers, gpus_per_worker=gpus,
            priority=PRIORITIES[rng.choice(["low", "low", "mid", "high"])],
            submit=round(rng.random() * 7200, 3), runtime=float(rng.randint(60, 1800)),
        ))  # fmt: skip
    return sorted(jobs, key=lambda j: j.submit)


def _job_manifest(job: ReplayJob) -> dict:
    priority = next(name for name, value in PRIORITIES.items() if value == job.priority)
    spec = {
        "suspend": True, "parallelism": job.workers, "completions": job.workers,
        "backoffLimit": 0,
        "template": {
            "metadata": {"annotations": {EXPECTED_RUNTIME_ANNOTATION: str(job.runtime)}},
            "spec": {"restartPolicy": "Never", "nodeSelector": {POOL_LABEL: job.pool},
                     "containers": [{"name": "main", "image": "train:1",
                                     "resources": {"requests": {GPU: str(job.gpus_per_worker)},
                                                   "limits": {GPU: str(job.gpus_per_worker)}}}]},
        },
    }  # fmt: skip
    if job.workers > 1:
        spec["completionMode"] = "Indexed"
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": job.name, "namespace": job.namespace,
                         "labels": {"kueue.x-k8s.io/queue-name": job.queue,
                                    "kueue.x-k8s.io/priority-class": priority}},
            "spec": spec}  # fmt: skip


def _on_the_cluster(jobs: list[ReplayJob], cqs: list[dict], lqs: list[dict], *,
                    fair_sharing: bool, afs: AfsConfig | None) -> tuple:  # fmt: skip
    """Each job's (first pod start, end) in seconds from ORIGIN, and Kueue's preemptions, as
    kubesim's controllers run them."""
    clock = Clock(time_scale=1e-9, start=datetime.fromtimestamp(ORIGIN, UTC))
    store = Store(clock=clock.timestamp)
    fleet = {"pools": [{"name": name, "nodes": nodes, "gpusPerNode": gpus,
                        "labels": {POOL_LABEL: name}}
                       for name, (nodes, gpus) in POOLS.items()]}  # fmt: skip
    for node in load_fleet(fleet):
        store.create(R.NODES, node)
    for name in POOLS:
        store.create(R.RESOURCE_FLAVORS, {
            "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor",
            "metadata": {"name": name}, "spec": {"nodeLabels": {POOL_LABEL: name}}})  # fmt: skip
    for name, value in PRIORITIES.items():
        store.create(R.WORKLOAD_PRIORITY_CLASSES, {
            "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "WorkloadPriorityClass",
            "metadata": {"name": name}, "value": value})  # fmt: skip
    store.ensure_namespaces(list(TEAMS))
    for cq in cqs:
        store.create(R.CLUSTER_QUEUES, cq)
    for lq in lqs:
        store.create(R.LOCAL_QUEUES, lq)
    started: dict[str, float] = {}
    ended: dict[str, float] = {}

    def record(etype: str, rt, obj: dict) -> None:
        if etype == "DELETED":
            return
        if rt.plural == "pods" and (obj.get("status") or {}).get("phase") == "Running":
            owner = (obj["metadata"].get("labels") or {}).get("job-name")
            started.setdefault(owner, clock.timestamp() - ORIGIN)
        elif rt.plural == "jobs" and rt.group == "batch":
            conditions = (obj.get("status") or {}).get("conditions") or []
            if any(c["type"] == "Complete" and c["status"] == "True" for c in conditions):
                ended.setdefault(obj["metadata"]["name"], clock.timestamp() - ORIGIN)

    store.subscribe(record)
    controllers = Controllers(store, clock)
    controllers.kueue.fair_sharing = fair_sharing
    controllers.kueue.set_admission_fair_sharing(afs)
    controllers.attach()
    controllers.run_until_idle()
    i = 0
    while True:
        submit = ORIGIN + jobs[i].submit if i < len(jobs) else None
        due = [t for t in (submit, controllers.next_due()) if t is not None]
        if not due:
            break
        clock.advance(max(0.0, min(due) - clock.timestamp()))
        while i < len(jobs) and ORIGIN + jobs[i].submit <= clock.timestamp():
            store.create(R.JOBS, _job_manifest(jobs[i]))
            i += 1
        controllers.run_until_idle()
    store.unsubscribe(record)
    return ({j.name: (started.get(j.name), ended.get(j.name)) for j in jobs},
            controllers.kueue.preemptions)  # fmt: skip


def _same(a: tuple, b: tuple) -> bool:
    """The same moments (within a millisecond: the cluster's clock adds float noise), or both
    never."""
    return all(x == y if x is None or y is None else abs(x - y) < 1e-3
               for x, y in zip(a, b, strict=True))  # fmt: skip


@pytest.mark.parametrize("sharing", ["plain", "fair-sharing", "member-fair-sharing"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_replay_starts_and_ends_every_job_when_the_cluster_does(seed, sharing):
    fair_sharing, members = sharing == "fair-sharing", sharing == "member-fair-sharing"
    queues = ("main", "other") if members else ("main",)
    jobs = _history(seed, 160, queues)
    weights = {"team-a": None, "team-b": "2", "team-c": "500m"} if fair_sharing else {}
    cqs = [_cluster_queue(team, weights.get(team), members=members) for team in TEAMS]
    lqs = [_local_queue(team, name) for team in TEAMS for name in queues]
    afs = AfsConfig(half_life=1800.0, sampling=60.0) if members else None
    cluster, preemptions = _on_the_cluster(jobs, cqs, lqs, fair_sharing=fair_sharing, afs=afs)
    result = replay(
        cluster_queues=cqs, local_queues=lqs,
        pools={name: [gpus] * nodes for name, (nodes, gpus) in POOLS.items()}, jobs=jobs,
        horizon=10**6, origin=datetime.fromtimestamp(ORIGIN, UTC), fair_sharing=fair_sharing,
        admission_fair_sharing=afs,
    )  # fmt: skip
    # The history is crowded enough to exercise what the replay must get right.
    assert preemptions > 20
    assert sum(1 for j in result.jobs if j.started is not None and j.started > j.submit) > 40
    replayed = {j.name: (j.started, j.ended) for j in result.jobs}
    differ = {name: (replayed[name], cluster[name]) for name in cluster
              if not _same(replayed[name], cluster[name])}  # fmt: skip
    assert not differ, f"{len(differ)} jobs differ (replay, cluster): {sorted(differ.items())[:5]}"
    assert result.preemptions == preemptions
