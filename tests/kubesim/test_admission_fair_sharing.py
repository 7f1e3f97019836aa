"""Kueue's admission fair sharing in kubesim (KEP-4136, the "Admission Fair Sharing" concept
page): LocalQueues of a ClusterQueue with `admissionScope.admissionMode:
UsageBasedAdmissionFairSharing` are served in the order of their decayed usage, with an entry
penalty per admission and a weight per LocalQueue. The scenarios run on the engine's simulated
clock (kubesim.replay); the last ones through the API server."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest

from kueuemodel.afs import AfsConfig, UsageLedger, parse_duration, quantity_text
from kueuemodel.replay import ReplayJob, replay
from tests.crd_validation import manifest_errors
from tests.kubesim.kueue_helpers import (
    GPU,
    cluster_queue,
    create,
    flavor,
    get,
    job,
    patch,
    priority_class,
    wait_for,
    workload_for,
)

HOUR = 3600.0
VISIBILITY = "/apis/visibility.kueue.x-k8s.io/v1beta2"
AFS = AfsConfig(half_life=HOUR, sampling=60.0)


def _cq(nominal: int, *, fair: bool = True, **preemption) -> dict:
    spec = {
        "namespaceSelector": {},
        "resourceGroups": [{"coveredResources": [GPU], "flavors": [
            {"name": "a100", "resources": [{"name": GPU, "nominalQuota": nominal}]}]}],
    }  # fmt: skip
    if fair:
        spec["admissionScope"] = {"admissionMode": "UsageBasedAdmissionFairSharing"}
    if preemption:
        spec["preemption"] = preemption
    return {"metadata": {"name": "cq"}, "spec": spec}


def _lq(name: str, weight=None) -> dict:
    spec = {"clusterQueue": "cq"}
    if weight is not None:
        spec["fairSharing"] = {"weight": weight}
    return {"metadata": {"name": name, "namespace": "team"}, "spec": spec}


def _job(key: str, queue: str, submit: float, gpus: int, runtime: float, priority=0) -> ReplayJob:
    return ReplayJob(key=key, namespace="team", queue=queue, pool="a100", resource=GPU,
                     workers=1, gpus_per_worker=gpus, priority=priority, submit=submit,
                     runtime=runtime)  # fmt: skip


def _run(jobs, *, nominal=8, fair=True, weights=None, afs=AFS, **preemption):
    """Replay copies of the jobs (as submitted) through one ClusterQueue of one pool."""
    jobs = [dataclasses.replace(j, admitted=None, started=None, ended=None, preempted=0,
                                gpu_seconds=0.0) for j in jobs]  # fmt: skip
    queues = sorted({j.queue for j in jobs})
    result = replay(
        cluster_queues=[_cq(nominal, fair=fair, **preemption)],
        local_queues=[_lq(q, (weights or {}).get(q)) for q in queues],
        pools={"a100": [nominal]}, jobs=jobs, horizon=100 * HOUR, admission_fair_sharing=afs,
    )  # fmt: skip
    return {j.key: j for j in result.jobs}


def test_a_local_queue_that_used_less_goes_first_although_it_asked_later():
    """Kueue's e2e scenario: lq-a saturates the queue, then both queues wait; when one of a's
    jobs ends, b's job is admitted before a's older one."""
    jobs = [_job("a1", "lq-a", 0, 4, 2 * HOUR), _job("a2", "lq-a", 0, 4, 5 * HOUR),
            _job("a3", "lq-a", HOUR, 4, HOUR), _job("b1", "lq-b", HOUR + 1, 4, HOUR)]  # fmt: skip
    fair = _run(jobs)
    assert fair["b1"].started == 2 * HOUR  # when a1 ended
    assert fair["a3"].started == 3 * HOUR  # when b1 ended, not when a1 did
    # The same queue without an admission scope serves the older job first.
    plain = _run(jobs, fair=False)
    assert plain["a3"].started == 2 * HOUR and plain["b1"].started == 3 * HOUR


def test_each_admission_adds_an_entry_penalty_at_once():
    """Two fresh queues: b asked first for three jobs, a for one. When room for two frees, b's
    first job is admitted and its penalty at once puts a ahead of b's second."""
    jobs = [_job("hold", "lq-c", 0, 4, 100), _job("b1", "lq-b", 1, 2, HOUR),
            _job("b2", "lq-b", 2, 2, HOUR), _job("b3", "lq-b", 3, 2, HOUR),
            _job("a1", "lq-a", 4, 2, HOUR)]  # fmt: skip
    fair = _run(jobs, nominal=4)
    assert {k for k, j in fair.items() if j.started == 100} == {"b1", "a1"}
    plain = _run(jobs, nominal=4, fair=False)
    assert {k for k, j in plain.items() if j.started == 100} == {"b1", "b2"}


def test_a_local_queue_weight_divides_its_usage():
    """Both queues used the same; a asked first. Equal weights: a goes first; b weighted 2
    counts half its usage and goes first."""
    jobs = [_job("a0", "lq-a", 0, 4, HOUR), _job("b0", "lq-b", 0, 4, HOUR),
            _job("a1", "lq-a", 100, 8, HOUR), _job("b1", "lq-b", 200, 8, HOUR)]  # fmt: skip
    even = _run(jobs)
    assert even["a1"].started == HOUR and even["b1"].started == 2 * HOUR
    weighted = _run(jobs, weights={"lq-b": "2"})
    assert weighted["b1"].started == HOUR and weighted["a1"].started == 2 * HOUR


def test_usage_decays_by_half_each_half_life_and_tends_to_what_is_held():
    ledger = UsageLedger(AfsConfig(half_life=HOUR, sampling=60.0))
    key = ("team", "lq")
    ledger.sample([key], 0.0)
    ledger.hold(key, {("a100", GPU): 4}, +1)
    for minute in range(1, 24 * 60):  # a day holding 4 GPUs
        ledger.sample([key], minute * 60.0)
    assert ledger.consumed[key][GPU] == pytest.approx(4.0, rel=1e-6)
    ledger.hold(key, {("a100", GPU): 4}, -1)
    start = (24 * 60 - 1) * 60.0
    ledger.sample([key], start + HOUR)
    assert ledger.consumed[key][GPU] == pytest.approx(2.0, rel=1e-6)
    ledger.sample([key], start + 3 * HOUR)  # one sample over two half-lives, as Kueue's decay
    assert ledger.consumed[key][GPU] == pytest.approx(0.5, rel=1e-6)
    # The weight of a resource (memory would otherwise count in bytes) and of the queue.
    ledger.consumed[key] = {GPU: 2.0, "memory": 2.0**30}
    weighted = UsageLedger(AfsConfig(half_life=HOUR, sampling=60.0, weights={"memory": 0}))
    weighted.consumed[key] = dict(ledger.consumed[key])
    assert weighted.usage(key, 1.0) == 2.0 and weighted.usage(key, 4.0) == 0.5
    assert weighted.usage(key, 0.0) == float("inf")
    assert ledger.usage(key, 1.0) > 2.0**30


def test_preemption_within_the_queue_takes_from_the_local_queue_that_used_most():
    """Kueue orders preemption candidates of one ClusterQueue by their LocalQueue's usage
    before priority and recency: a's job goes although b's was admitted later."""
    jobs = [_job("a-old", "lq-a", 0, 4, 3 * HOUR), _job("a1", "lq-a", 3 * HOUR, 2, 10 * HOUR),
            _job("b1", "lq-b", 3 * HOUR + 10, 2, 10 * HOUR),
            _job("urgent", "lq-c", 4 * HOUR, 2, HOUR, priority=100)]  # fmt: skip
    fair = _run(jobs, nominal=4, withinClusterQueue="LowerPriority")
    assert fair["urgent"].started == 4 * HOUR
    assert (fair["a1"].preempted, fair["b1"].preempted) == (1, 0)
    plain = _run(jobs, nominal=4, fair=False,
                 withinClusterQueue="LowerPriority")  # fmt: skip
    assert (plain["a1"].preempted, plain["b1"].preempted) == (0, 1)  # the newest goes


@pytest.mark.parametrize("fair_sharing", [False, True])
@pytest.mark.parametrize("seed", [0, 3])
def test_the_replay_shortcut_keeps_admission_fair_sharing_exact(seed, fair_sharing):
    """Three teams of a cohort over three pools, each with three members' LocalQueues (one of
    weight 2): buckets ordered by their LocalQueue's usage give the same replay as trying every
    workload in that order, with penalties, borrowing, reclaim and priority preemption."""
    quotas = {"vision": {"a100": 8, "l4": 4}, "nlp": {"a100": 8, "h100": 4},
              "speech": {"a100": 4, "l4": 4}}  # fmt: skip
    cqs = []
    for team, pools in quotas.items():
        flavors = [{"name": pool, "resources": [{"name": GPU, "nominalQuota": n,
                                                 "borrowingLimit": n}]}
                   for pool, n in pools.items()]  # fmt: skip
        cqs.append({"metadata": {"name": team}, "spec": {
            "cohortName": "research", "namespaceSelector": {},
            "admissionScope": {"admissionMode": "UsageBasedAdmissionFairSharing"},
            "preemption": {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"},
            "resourceGroups": [{"coveredResources": [GPU], "flavors": flavors}]}})  # fmt: skip
    lqs = [{"metadata": {"name": f"m{i}", "namespace": f"ns-{team}"},
            "spec": {"clusterQueue": team, **({"fairSharing": {"weight": "2"}} if i else {})}}
           for team in quotas for i in range(3)]  # fmt: skip

    def jobs():
        rng = random.Random(seed)
        out = []
        for i in range(300):
            team = rng.choice(sorted(quotas))
            out.append(ReplayJob(
                key=f"j{i}", namespace=f"ns-{team}", queue=f"m{rng.choice([0, 0, 1, 2])}",
                pool=rng.choice(sorted(quotas[team])), resource=GPU,
                workers=rng.choice([1, 1, 1, 2]), gpus_per_worker=rng.choice([1, 1, 2, 4, 8]),
                priority=rng.choice([10, 100, 100, 500, 1000]),
                submit=float(int(rng.uniform(0, 20_000))),
                runtime=float(int(rng.lognormvariate(7.5, 1))),
            ))  # fmt: skip
        return out

    slow, fast = (
        replay(cluster_queues=cqs, local_queues=lqs,
               pools={"a100": [8, 8], "l4": [4, 4], "h100": [8]}, jobs=jobs(), horizon=60_000,
               fair_sharing=fair_sharing, admission_fair_sharing=AFS, shortcut=shortcut)
        for shortcut in (False, True)
    )  # fmt: skip
    assert slow.preemptions > 100
    assert [dataclasses.astuple(j) for j in fast.jobs] == [
        dataclasses.astuple(j) for j in slow.jobs
    ]


def test_configuration_reads_kueues_section_and_go_durations():
    config = AfsConfig.from_text(json.dumps({
        "usageHalfLifeTime": "168h", "usageSamplingInterval": "5m",
        "resourceWeights": {"cpu": 0, "memory": 0}}))  # fmt: skip
    assert (config.half_life, config.sampling) == (168 * HOUR, 300.0)
    assert config.weights == {"cpu": 0.0, "memory": 0.0}
    assert AfsConfig.from_text("") is None
    assert parse_duration("1h30m") == 5400 and parse_duration("500ms") == 0.5
    with pytest.raises(ValueError):
        parse_duration("soon")
    assert (quantity_text(3.0), quantity_text(2.5)) == ("3", "2500m")


# -- through the API server ---------------------------------------------------------------------


@pytest.fixture
def afs_env(monkeypatch):
    """kubesim's Kueue with admission fair sharing, a one-hour half-life and 1 s samples."""
    monkeypatch.setenv("KUBESIM_ADMISSION_FAIR_SHARING", json.dumps({
        "usageHalfLifeTime": "1h", "usageSamplingInterval": "1s",
        "resourceWeights": {"cpu": 0, "memory": 0}}))  # fmt: skip


def test_the_local_queues_report_their_usage_and_the_visibility_api_their_order(
    afs_env, k8s, namespace, raw
):
    flavor(k8s)
    priority_class(k8s, "high", 100)
    cluster_queue(k8s, "cq", 8)
    scope = {"admissionScope": {"admissionMode": "UsageBasedAdmissionFairSharing"}}
    patch(k8s, "clusterqueues", "cq", {"spec": scope})
    for lq in ("lq-a", "lq-b"):
        create(k8s, "localqueues", {"kind": "LocalQueue", "metadata": {"name": lq},
                                    "spec": {"clusterQueue": "cq"}}, namespace)  # fmt: skip
    job(k8s, namespace, "a-big", gpus=8, duration=3600, queue="lq-a")
    # (None until Kueue has made the Workload: a loaded run asked before it had)
    wait_for(lambda: ((workload_for(k8s, namespace, "a-big") or {}).get("status") or {})
             .get("admission"),
             message="a-big admitted")  # fmt: skip

    def consumed():
        status = get(k8s, "localqueues", "lq-a", namespace).get("status") or {}
        afs = (status.get("fairSharing") or {}).get("admissionFairSharingStatus") or {}
        return afs if afs.get("consumedResources", {}).get(GPU) else None

    afs = wait_for(consumed, message="lq-a's consumed GPUs")
    live = get(k8s, "localqueues", "lq-a", namespace)
    as_written = {key: live[key] for key in ("apiVersion", "kind", "spec", "status")}
    as_written["metadata"] = {"name": "lq-a", "namespace": namespace}
    assert manifest_errors(as_written) == []
    assert afs["lastUpdate"].endswith("Z")
    # a waits with a higher priority job; b with a plain one asked later: b's goes first.
    job(k8s, namespace, "a-next", gpus=8, duration=60, queue="lq-a", priority="high")
    job(k8s, namespace, "b-next", gpus=8, duration=60, queue="lq-b")

    def order():
        _, _, pending = raw("GET", f"{VISIBILITY}/clusterqueues/cq/pendingworkloads")
        items = sorted(pending["items"], key=lambda i: i["positionInClusterQueue"])
        return [i["localQueueName"] for i in items] if len(items) == 2 else None

    assert wait_for(order, message="two pending workloads") == ["lq-b", "lq-a"]
