"""kubesim.replay: a job history run through the Kueue engine on a simulated clock, with pods
placed on the pools' nodes as kubesim's scheduler places them."""

from __future__ import annotations

import dataclasses
import random

import pytest

from kueuemodel.replay import ReplayJob, replay

GPU = "nvidia.com/gpu"


def _cq(name: str, flavors: dict[str, int], cohort: str | None = None, weight=None,
        **preemption) -> dict:  # fmt: skip
    spec = {
        "namespaceSelector": {},
        "resourceGroups": [{
            "coveredResources": [GPU],
            "flavors": [{"name": f, "resources": [{"name": GPU, "nominalQuota": n}]}
                        for f, n in flavors.items()],
        }],
    }  # fmt: skip
    if cohort:
        spec["cohortName"] = cohort
    if preemption:
        spec["preemption"] = preemption
    if weight is not None:
        spec["fairSharing"] = {"weight": weight}
    return {"metadata": {"name": name}, "spec": spec}


def _lq(namespace: str, cq: str) -> dict:
    return {"metadata": {"name": "main", "namespace": namespace}, "spec": {"clusterQueue": cq}}


def _job(key: str, submit: float, gpus: int, runtime: float, *, pool="a100", workers=1,
         priority=0, ns="team-a") -> ReplayJob:  # fmt: skip
    return ReplayJob(key=key, namespace=ns, queue="main", pool=pool, resource=GPU,
                     workers=workers, gpus_per_worker=gpus, priority=priority, submit=submit,
                     runtime=runtime)  # fmt: skip


def test_a_job_waits_for_a_node_with_room_although_the_pool_has_the_gpus_free():
    jobs = [_job("a", 0, 6, 100), _job("b", 0, 6, 200), _job("c", 10, 4, 50)]
    result = replay(cluster_queues=[_cq("cq", {"a100": 16})], local_queues=[_lq("team-a", "cq")],
                    pools={"a100": [8, 8]}, jobs=jobs, horizon=1000)  # fmt: skip
    a, b, c = result.jobs
    assert a.started == b.started == 0
    # Quota admits c at once (12 + 4 <= 16), but each node has 2 GPUs free: it starts when a
    # ends and frees its node.
    assert c.admitted == 10 and c.started == 100 and c.ended == 150
    # The same pool as one 16-GPU node starts it at once.
    one_node = replay(cluster_queues=[_cq("cq", {"a100": 16})],
                      local_queues=[_lq("team-a", "cq")], pools={"a100": 16},
                      jobs=[_job("a", 0, 6, 100), _job("b", 0, 6, 200), _job("c", 10, 4, 50)],
                      horizon=1000)  # fmt: skip
    assert one_node.jobs[2].started == 10


def test_workers_are_placed_one_by_one_and_the_job_ends_with_its_last_worker():
    # Quota admits all three at once (18 of 20), the nodes do not: pods created in the same
    # second bind in name order, as kubesim's scheduler binds them, so the two small jobs share
    # the first node (the fullest that fits), two workers fill the second, the third waits.
    jobs = [_job("s1", 0, 3, 100), _job("s2", 0, 3, 100), _job("x-gang", 0, 4, 300, workers=3)]
    result = replay(cluster_queues=[_cq("cq", {"a100": 20})], local_queues=[_lq("team-a", "cq")],
                    pools={"a100": [8, 8]}, jobs=jobs, horizon=1000)  # fmt: skip
    gang = result.jobs[2]
    assert gang.admitted == 0 and gang.started == 0 and gang.ended == 100 + 300
    assert gang.gpu_seconds == 3 * 4 * 300
    assert result.busy_gpu_seconds["a100"] == 2 * 3 * 100 + 3 * 4 * 300


def test_a_job_runs_in_its_own_pool_only():
    # The team's queue has both flavors; the job asks for the small pool and must wait there
    # rather than run in the other.
    cq = _cq("cq", {"l4": 4, "a100": 8})
    jobs = [_job("l4-1", 0, 4, 100, pool="l4"), _job("l4-2", 0, 4, 100, pool="l4")]
    result = replay(cluster_queues=[cq], local_queues=[_lq("team-a", "cq")],
                    pools={"l4": [4], "a100": [8]}, jobs=jobs, horizon=1000)  # fmt: skip
    assert [j.started for j in result.jobs] == [0, 100]
    assert result.busy_gpu_seconds["a100"] == 0


def test_a_preempted_job_loses_its_pods_and_starts_its_run_over():
    cq = _cq("cq", {"a100": 8}, withinClusterQueue="LowerPriority")
    jobs = [_job("low", 0, 8, 100), _job("high", 40, 8, 50, priority=100)]
    result = replay(cluster_queues=[cq], local_queues=[_lq("team-a", "cq")],
                    pools={"a100": [8]}, jobs=jobs, horizon=1000)  # fmt: skip
    low, high = result.jobs
    assert high.started == 40 and high.ended == 90
    assert low.preempted == 1 and low.started == 0 and low.ended == 90 + 100
    assert low.gpu_seconds == 8 * (40 + 100)


def test_a_trace_hears_every_pod_start_and_stop_with_why_it_stopped():
    """What a history recorder (the demo's) writes its pods from: the preempted job's first pod
    stopped at 40 and its second ran 90-190; a job cancelled while running; one cut at the end."""
    from kueuemodel.replay import PodTrace

    class Heard(PodTrace):
        def __init__(self):
            self.events = []

        def pod_started(self, job, node, t):
            self.events.append(("start", job.key, node, t))

        def pod_stopped(self, job, node, t, why):
            self.events.append(("stop", job.key, node, t, why))

        def job_admitted(self, job, t):
            self.events.append(("admitted", job.key, t))

        def job_preempted(self, job, t, reason):
            self.events.append(("preempted", job.key, t, reason))

    cq = _cq("cq", {"a100": 16}, withinClusterQueue="LowerPriority")
    jobs = [_job("low", 0, 8, 100), _job("high", 40, 8, 50, priority=100, workers=2),
            _job("gone", 200, 8, 100), _job("late", 250, 8, 1000)]  # fmt: skip
    jobs[2].cancel = 230
    heard = Heard()
    replay(cluster_queues=[cq], local_queues=[_lq("team-a", "cq")], pools={"a100": [8, 8]},
           jobs=jobs, horizon=400, trace=heard)  # fmt: skip
    assert heard.events == [
        ("admitted", "low", 0), ("start", "low", 0, 0),
        ("admitted", "high", 40), ("preempted", "low", 40, "InClusterQueue"),
        ("stop", "low", 0, 40, "preempted"),
        ("start", "high", 1, 40), ("start", "high", 0, 40),
        ("stop", "high", 1, 90, "succeeded"), ("stop", "high", 0, 90, "succeeded"),
        ("admitted", "low", 90), ("start", "low", 0, 90),
        ("stop", "low", 0, 190, "succeeded"),
        ("admitted", "gone", 200), ("start", "gone", 0, 200),
        ("stop", "gone", 0, 230, "cancelled"),
        ("admitted", "late", 250), ("start", "late", 0, 250),
        ("stop", "late", 0, 400, "horizon"),
    ]  # fmt: skip


def test_an_evicted_pods_gpus_free_up_after_the_pods_placed_at_the_same_instant():
    """As in kubesim, whose Job controller deletes a preempted job's pods in the round after the
    scheduler bound the pods created with them: at 20 the urgent job preempts j2 and its pod
    goes to the other node (j2's pod still holds its GPU), which leaves the two nodes with one
    free GPU each; the 4-GPU job admitted at 60 then waits for a whole node until 110."""
    jobs = [_job("j0", 10, 2, 50, priority=50), _job("j1", 10, 4, 30, priority=50),
            _job("j2", 0, 1, 100), _job("j3", 10, 1, 100, priority=50),
            _job("urgent", 20, 1, 30, priority=100), _job("j5", 0, 2, 30, priority=50)]  # fmt: skip
    result = replay(cluster_queues=[_cq("cq", {"a100": 6}, withinClusterQueue="LowerPriority")],
                    local_queues=[_lq("team-a", "cq")], pools={"a100": [4, 4]}, jobs=jobs,
                    horizon=1000)  # fmt: skip
    by_key = {j.key: j for j in result.jobs}
    assert by_key["urgent"].started == 20 and by_key["j2"].preempted == 1
    # Had j2's GPU come back at once, the urgent pod would have taken it and kept a node whole.
    assert (by_key["j1"].admitted, by_key["j1"].started) == (60, 110)


def test_a_checkpointed_job_goes_on_from_where_its_workers_got_to():
    cq = _cq("cq", {"a100": 8}, withinClusterQueue="LowerPriority")
    low = _job("low", 0, 4, 100, workers=2)
    low.checkpointed = True
    result = replay(cluster_queues=[cq], local_queues=[_lq("team-a", "cq")],
                    pools={"a100": [8]}, jobs=[low, _job("high", 40, 8, 50, priority=100)],
                    horizon=1000)  # fmt: skip
    low = result.jobs[0]
    # Preempted at 40 after 40 s of its 100, admitted again at 90: 60 s left.
    assert low.preempted == 1 and low.ended == 90 + 60
    assert low.gpu_seconds == 8 * (40 + 60)


def test_what_ran_when_the_window_opened_holds_its_quota_whatever_it_says_now():
    running = _job("running", -500, 8, 50)  # submitted before the window, 50 s left of its run
    running.running_at_start = True
    jobs = [running, _job("next", 0, 4, 10)]
    result = replay(cluster_queues=[_cq("cq", {"a100": 8})], local_queues=[_lq("team-a", "cq")],
                    pools={"a100": [8]}, jobs=jobs, horizon=1000)  # fmt: skip
    first, nxt = result.jobs
    assert (first.admitted, first.started, first.ended) == (0, 0, 50)
    assert nxt.started == 50
    # With only 4 GPUs of quota now, it still runs (Kueue evicts nothing when quota shrinks).
    for job in jobs:
        job.admitted = job.started = job.ended = None
        job.preempted, job.gpu_seconds = 0, 0.0
    small = replay(cluster_queues=[_cq("cq", {"a100": 4})], local_queues=[_lq("team-a", "cq")],
                   pools={"a100": [8]}, jobs=jobs, horizon=1000)  # fmt: skip
    assert small.jobs[0].ended == 50 and small.jobs[1].started == 50


# -- fair sharing (Kueue's dominant resource share) ------------------------------------------------


def _borrowers(weight_b=None, **preemption):
    """A lender with 8 GPUs and no work, and two teams with no quota of their own who borrow
    everything they run."""
    cqs = [_cq("lender", {"a100": 8}, "dept"),
           _cq("team-a", {"a100": 0}, "dept", **preemption),
           _cq("team-b", {"a100": 0}, "dept", weight=weight_b, **preemption)]  # fmt: skip
    lqs = [_lq("ns-lender", "lender"), _lq("ns-a", "team-a"), _lq("ns-b", "team-b")]
    return cqs, lqs


def _running_at(result, t: float, ns: str) -> int:
    """Jobs of the namespace started by t and not ended (a preempted one counts as started)."""
    return sum(1 for j in result.jobs if j.namespace == ns and j.started is not None
               and j.started <= t and (j.ended is None or j.ended > t))  # fmt: skip


def test_without_fair_sharing_the_first_queue_takes_all_it_can_borrow():
    cqs, lqs = _borrowers()
    jobs = [_job(f"a{i}", 0, 1, 1000, ns="ns-a") for i in range(8)]
    jobs += [_job(f"b{i}", 0, 1, 1000, ns="ns-b") for i in range(8)]
    result = replay(cluster_queues=cqs, local_queues=lqs, pools={"a100": [8]}, jobs=jobs,
                    horizon=100)  # fmt: skip
    assert (_running_at(result, 1, "ns-a"), _running_at(result, 1, "ns-b")) == (8, 0)


def test_without_fair_sharing_borrowers_go_by_priority_then_age_not_by_queue_name():
    def started(priority_a: int) -> tuple:
        cqs, lqs = _borrowers()
        # The lender's own job holds its 8 GPUs until 100; team-b asked first, then team-a.
        jobs = [_job("own", 0, 8, 100, ns="ns-lender"), _job("b", 10, 8, 100, ns="ns-b"),
                _job("a", 20, 8, 100, ns="ns-a", priority=priority_a)]  # fmt: skip
        result = replay(cluster_queues=cqs, local_queues=lqs, pools={"a100": [8]}, jobs=jobs,
                        horizon=1000)  # fmt: skip
        return tuple(j.started for j in result.jobs[1:])

    assert started(0) == (100, 200)  # b, then a
    assert started(10) == (200, 100)  # a higher priority goes before an older request


def test_fair_sharing_splits_what_is_borrowed_by_the_queues_weights():
    # One GPU at a time to the queue whose share would be lowest with it (125 per GPU over
    # the weight); equal shares to the older request, team-a's (submitted first). With weight
    # 0.5, team-b's second GPU would make its share 500 against team-a's fourth at 500: a tie
    # team-a wins, so 6 and 2.
    for weight_b, split in ((None, (4, 4)), ("3", (2, 6)), ("500m", (6, 2))):
        cqs, lqs = _borrowers(weight_b)
        jobs = [_job(f"a{i}", 0, 1, 1000, ns="ns-a") for i in range(8)]
        jobs += [_job(f"b{i}", 0, 1, 1000, ns="ns-b") for i in range(8)]
        result = replay(cluster_queues=cqs, local_queues=lqs, pools={"a100": [8]}, jobs=jobs,
                        horizon=100, fair_sharing=True)  # fmt: skip
        running = (_running_at(result, 1, "ns-a"), _running_at(result, 1, "ns-b"))
        assert running == split, weight_b


def test_fair_sharing_preempts_the_largest_borrower_down_to_an_equal_share():
    reclaim = {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}
    jobs = [_job(f"a{i}", 0, 1, 1000, ns="ns-a") for i in range(8)]
    jobs += [_job(f"b{i}", 10, 1, 1000, ns="ns-b") for i in range(8)]
    cqs, lqs = _borrowers(**reclaim)
    plain = replay(cluster_queues=cqs, local_queues=lqs, pools={"a100": [8]}, jobs=jobs,
                   horizon=100)  # fmt: skip
    # Without fair sharing team-b, having no quota to reclaim, waits for team-a to finish.
    assert (_running_at(plain, 20, "ns-a"), _running_at(plain, 20, "ns-b")) == (8, 0)
    for job in jobs:
        job.admitted = job.started = job.ended = None
        job.preempted, job.gpu_seconds = 0, 0.0
    fair = replay(cluster_queues=cqs, local_queues=lqs, pools={"a100": [8]}, jobs=jobs,
                  horizon=100, fair_sharing=True)  # fmt: skip
    # team-b preempts while its share with the new job stays at most team-a's after the
    # preemption: 4 each (shares 500 and 500), the newest of team-a's jobs go first.
    assert _running_at(fair, 20, "ns-b") == 4
    preempted = sorted(j.key for j in fair.jobs if j.preempted)
    assert preempted == ["a4", "a5", "a6", "a7"]


def test_a_queue_of_weight_zero_is_the_first_preempted_and_never_preempts():
    reclaim = {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}
    cqs, lqs = _borrowers(weight_b="0", **reclaim)
    jobs = [_job(f"b{i}", 0, 1, 1000, ns="ns-b") for i in range(8)]
    jobs += [_job(f"a{i}", 10, 1, 1000, ns="ns-a") for i in range(8)]
    fair = replay(cluster_queues=cqs, local_queues=lqs, pools={"a100": [8]}, jobs=jobs,
                  horizon=100, fair_sharing=True)  # fmt: skip
    # team-b borrowed everything while alone; team-a takes all of it back.
    assert _running_at(fair, 20, "ns-a") == 8
    assert sorted(j.key for j in fair.jobs if j.preempted) == [f"b{i}" for i in range(8)]


@pytest.mark.parametrize("fair_sharing", [False, True])
def test_the_shortcut_changes_nothing_but_the_time(fair_sharing):
    """Skipping workloads dominated by one that just failed gives the very same replay as
    trying every one, on a busy cohort with priorities, preemption and mixed sizes."""
    rng = random.Random(11)
    cqs = [_cq("team-a", {"a100": 8, "l4": 4}, "dept", withinClusterQueue="LowerPriority",
               reclaimWithinCohort="Any"),
           _cq("team-b", {"a100": 4}, "dept", weight="2", withinClusterQueue="LowerPriority",
               reclaimWithinCohort="Any"),
           _cq("team-c", {"a100": 4, "l4": 4}, "dept")]  # fmt: skip
    lqs = [_lq("ns-a", "team-a"), _lq("ns-b", "team-b"), _lq("ns-c", "team-c")]

    def jobs():
        rng.seed(11)
        return [
            _job(f"j{i}", rng.uniform(0, 20_000), rng.choice([1, 1, 2, 4, 8]),
                 rng.uniform(100, 3_000), pool=rng.choice(["a100", "a100", "l4"]),
                 workers=rng.choice([1, 1, 2]), priority=rng.choice([0, 10, 100]),
                 ns=rng.choice(["ns-a", "ns-b", "ns-c"]))
            for i in range(400)
        ]  # fmt: skip

    runs = [
        replay(cluster_queues=cqs, local_queues=lqs, pools={"a100": [8, 8], "l4": [4, 4]},
               jobs=jobs(), horizon=40_000, fair_sharing=fair_sharing, shortcut=shortcut)
        for shortcut in (False, True)
    ]  # fmt: skip
    slow, fast = runs
    assert slow.preemptions > 0 and sum(j.started is None for j in slow.jobs) < 400
    assert [dataclasses.astuple(j) for j in fast.jobs] == [
        dataclasses.astuple(j) for j in slow.jobs
    ]
    assert (fast.admissions, fast.preemptions, fast.busy_gpu_seconds) == (
        slow.admissions,
        slow.preemptions,
        slow.busy_gpu_seconds,
    )


def _demo_like_cohort():
    """Three teams of one cohort over three pools, as in the demo: nominal quota in two pools
    each, borrowing up to as much again, priority preemption and reclaim of any borrower."""
    spec = {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"}
    quotas = {"vision": {"a100": 8, "l4": 4}, "nlp": {"a100": 8, "h100": 4},
              "speech": {"a100": 4, "l4": 4}}  # fmt: skip
    cqs = []
    for team, pools in quotas.items():
        cq = _cq(team, pools, "research", **spec)
        for flavor in cq["spec"]["resourceGroups"][0]["flavors"]:
            flavor["resources"][0]["borrowingLimit"] = flavor["resources"][0]["nominalQuota"]
        cqs.append(cq)
    return cqs, [_lq(f"ns-{team}", team) for team in quotas], quotas


@pytest.mark.parametrize("fair_sharing", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 3])
def test_the_shortcut_changes_nothing_on_a_cohort_that_preempts_across_pools(seed, fair_sharing):
    """Twice as much work as the pools hold, in every size and tier: workloads evicted in one
    round, releases in one pool while others wait in another, reclaim and priority preemption
    one after another. Passing over workloads alike as a block (and those of other pools when
    quota is released) gives the very same replay as trying every workload."""
    cqs, lqs, quotas = _demo_like_cohort()

    def jobs():
        rng = random.Random(seed)
        out = []
        for i in range(300):
            team = rng.choice(sorted(quotas))
            out.append(_job(
                f"j{i}", float(int(rng.uniform(0, 20_000))), rng.choice([1, 1, 2, 4, 8]),
                float(int(rng.lognormvariate(7.5, 1))), pool=rng.choice(sorted(quotas[team])),
                workers=rng.choice([1, 1, 1, 2]), priority=rng.choice([10, 100, 100, 500, 1000]),
                ns=f"ns-{team}",
            ))  # fmt: skip
        return out

    slow, fast = (
        replay(cluster_queues=cqs, local_queues=lqs,
               pools={"a100": [8, 8], "l4": [4, 4], "h100": [8]}, jobs=jobs(), horizon=60_000,
               fair_sharing=fair_sharing, shortcut=shortcut)
        for shortcut in (False, True)
    )  # fmt: skip
    assert slow.preemptions > 100
    assert [dataclasses.astuple(j) for j in fast.jobs] == [
        dataclasses.astuple(j) for j in slow.jobs
    ]
    assert (fast.admissions, fast.preemptions) == (slow.admissions, slow.preemptions)
