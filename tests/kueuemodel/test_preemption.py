"""Preemption: lower priorities of the same queue, borrowed quota reclaimed by a queue within
its nominal quota, the fewest victims needed, Kueue's messages; with fair sharing, by share."""

from kueuemodel import preemption
from tests.kueuemodel.builders import admitted, cluster_queue, model_of, submit, workload


def _filled(model, *wls):
    submit(model, *wls)
    model.schedule()
    assert admitted(model) == {wl.name for wl in wls}
    return wls


def test_a_higher_priority_takes_the_newest_lowest_priority_only_as_much_as_it_needs():
    model = model_of([cluster_queue("a", {"a100": 6}, cohort=None)])
    _filled(model, workload("low-old", "a", 2), workload("low-new", "a", 2),
            workload("mid", "a", 2, priority=5))  # fmt: skip
    submit(model, workload("urgent", "a", 2, priority=10))
    model.schedule()
    assert admitted(model) == {"low-old", "mid", "urgent"}
    assert model.listener.of("evicted") == [("low-new", "Preempted", "InClusterQueue", True)]
    victim = model.workloads[("a", "low-new")]
    assert victim.state == "pending" and model.preemptions == 1
    assert model.listener.why["low-new"] == (
        "Preempted to accommodate a workload (UID: uid-urgent, JobUID: UNKNOWN) due to "
        "prioritization in the ClusterQueue; preemptor path: /a; preemptee path: /a; "
        "preemptor: a/urgent"
    )


def test_equal_priority_preempts_nothing_under_lower_priority():
    model = model_of([cluster_queue("a", {"a100": 2}, cohort=None)])
    _filled(model, workload("first", "a", 2))
    submit(model, workload("second", "a", 2))
    model.schedule()
    assert admitted(model) == {"first"} and model.preemptions == 0


def test_a_queue_within_its_quota_reclaims_what_others_borrow():
    model = model_of([cluster_queue("a", {"a100": 4}), cluster_queue("b", {"a100": 4})])
    _filled(model, workload("b-own", "b", 4), workload("b-borrowed", "b", 4))
    submit(model, workload("a-back", "a", 4))
    model.schedule()
    assert admitted(model) == {"b-own", "a-back"}
    assert model.listener.of("evicted") == [("b-borrowed", "Preempted", "InCohortReclamation",
                                             True)]  # fmt: skip
    assert (
        "due to reclamation within the cohort; preemptor path: /dept/a; preemptee path: "
        "/dept/b; preemptor: a/a-back"
    ) in model.listener.why["b-borrowed"]


def test_a_queue_beyond_its_quota_reclaims_nothing():
    model = model_of([cluster_queue("a", {"a100": 4}), cluster_queue("b", {"a100": 4})])
    _filled(model, workload("b-own", "b", 4), workload("b-borrowed", "b", 4))
    submit(model, workload("a-too-big", "a", 6))
    model.schedule()
    assert admitted(model) == {"b-own", "b-borrowed"} and model.preemptions == 0


def test_a_workload_evicted_in_this_cycle_preempts_nothing():
    model = model_of([cluster_queue("a", {"a100": 2}, cohort=None)])
    (running,) = _filled(model, workload("running", "a", 2))
    waiting = workload("waiting", "a", 2, priority=10)
    submit(model, waiting)
    model.evicted_now = {waiting.key}
    assert preemption.find_victims(model, waiting, model.cqs["a"]) == ([], None)
    model.evicted_now = set()
    assert preemption.find_victims(model, waiting, model.cqs["a"]) == ([running], [{
        "nvidia.com/gpu": "a100"}])  # fmt: skip


def test_with_fair_sharing_the_queue_above_its_share_loses_to_one_below():
    """b borrows all of a's idle quota; a, below its share, takes back what it needs from b,
    and what b still borrows after is not touched."""
    model = model_of([cluster_queue("a", {"a100": 4}), cluster_queue("b", {"a100": 4})],
                     fair_sharing=True)  # fmt: skip
    _filled(model, *[workload(f"b{i}", "b", 2) for i in range(4)])
    submit(model, workload("a-back", "a", 2))
    model.schedule()
    assert admitted(model) == {"b0", "b1", "b2", "a-back"}
    assert model.listener.of("evicted") == [("b3", "Preempted", "InCohortReclamation", True)]
    assert model.share(model.cqs["b"]).weighted == 250  # 2 of the 8 lendable GPUs, per 1000


def test_a_raised_priority_protects_an_admitted_workload_and_a_lowered_one_exposes_it():
    """A running job moved to another WorkloadPriorityClass (kueue#7289): its priority counts
    from then on, for preemption and for the pending that waited on it."""
    model = model_of([cluster_queue("a", {"a100": 2}, cohort=None)])
    (running,) = _filled(model, workload("running", "a", 2, priority=5))
    model.set_priority(running, 20)
    submit(model, workload("urgent", "a", 2, priority=10))
    model.schedule()
    assert admitted(model) == {"running"} and model.preemptions == 0
    model.set_priority(running, 1)
    model.schedule()
    assert admitted(model) == {"urgent"} and model.preemptions == 1


def test_a_raised_priority_moves_a_pending_workload_ahead():
    model = model_of([cluster_queue("a", {"a100": 2}, cohort=None)])
    _filled(model, workload("running", "a", 2, priority=50))
    first, second = workload("first", "a", 2), workload("second", "a", 2)
    submit(model, first, second)
    model.schedule()
    model.set_priority(second, 7)
    model.finish(model.workloads[("a", "running")], True, "done")
    model.schedule()
    assert admitted(model) == {"second"}
