"""Ordering: a ClusterQueue's workloads in priority, then creation order; BestEffortFIFO sets
aside what does not fit and lets later ones go, StrictFIFO stops at its head; what was set
aside is tried again when quota is released; under admission fair sharing, the LocalQueue that
used least goes first."""

from kueuemodel.afs import AfsConfig
from tests.kueuemodel.builders import admitted, cluster_queue, model_of, submit, workload


def test_higher_priority_then_older_goes_first():
    model = model_of([cluster_queue("a", {"a100": 4}, cohort=None)])
    submit(model, workload("old", "a", 2), workload("new", "a", 2),
           workload("urgent", "a", 2, priority=10))  # fmt: skip
    assert [key[1] for _, key in model.cqs["a"].active] == ["urgent", "old", "new"]
    assert model.head(model.cqs["a"])[1] == ("a", "urgent")
    model.schedule()
    assert admitted(model) == {"urgent", "old"}


def test_best_effort_fifo_lets_a_smaller_one_pass_a_head_that_does_not_fit():
    model = model_of([cluster_queue("a", {"a100": 4}, cohort=None)])
    running, big, small = submit(model, workload("running", "a", 3), workload("big", "a", 4),
                                 workload("small", "a", 1))  # fmt: skip
    model.schedule()
    assert admitted(model) == {"running", "small"}
    assert big.parked and model.cqs["a"].parked == {big.key}
    assert model.listener.of("pending") == [
        ("big", "couldn't assign flavors to pod set main: insufficient unused quota for "
                "nvidia.com/gpu in flavor a100, 4 more needed"),
    ]  # fmt: skip
    # Quota released in the cohort: what was set aside is tried again.
    model.finish(running, True, "")
    model.finish(small, True, "")
    model.schedule()
    assert big.state == "admitted" and not model.cqs["a"].parked


def test_strict_fifo_waits_for_its_head():
    model = model_of([cluster_queue("a", {"a100": 4}, cohort=None, strategy="StrictFIFO")])
    submit(model, workload("running", "a", 3), workload("big", "a", 4), workload("small", "a", 1))
    model.schedule()
    assert admitted(model) == {"running"}
    assert not model.cqs["a"].parked


def test_a_stopped_local_queue_holds_its_workloads_and_says_so():
    held = {"clusterQueue": "a", "stopPolicy": "Hold"}
    model = model_of([cluster_queue("a", {"a100": 4}, cohort=None)],
                     local_queues={("a", "lq"): "a", ("a", "held"): held})  # fmt: skip
    submit(model, workload("held", "a", 1, queue="held"), workload("free", "a", 1))
    model.schedule()
    assert admitted(model) == {"free"}
    assert model.listener.of("pending") == [("held", "LocalQueue held is inactive")]


def test_a_workload_whose_queue_is_missing_or_elsewhere_says_why():
    model = model_of([cluster_queue("a", {"a100": 4}, cohort=None,
                                    namespaceSelector={"matchLabels": {"team": "a"}})],
                     local_queues={("a", "lq"): "a", ("b", "lq"): "a"})  # fmt: skip
    model.set_namespace("a", {"team": "a"})
    model.rebuild()
    submit(model, workload("lost", "a", 1, queue="nowhere"), workload("stranger", "b", 1),
           workload("fine", "a", 1))  # fmt: skip
    model.schedule()
    assert admitted(model) == {"fine"}
    assert model.listener.of("pending") == [
        ("lost", "LocalQueue nowhere doesn't exist"),
        ("stranger", "workload namespace doesn't match ClusterQueue selector"),
    ]


def test_under_admission_fair_sharing_the_local_queue_that_used_least_goes_first():
    """Two members' LocalQueues in one ClusterQueue: a admitted twice, so b's later workload
    goes before a's earlier one."""
    scope = {"admissionMode": "UsageBasedAdmissionFairSharing"}
    cq = cluster_queue("team", {"a100": 4}, cohort=None, admissionScope=scope)
    model = model_of([cq], local_queues={("team", "a"): "team", ("team", "b"): "team"},
                     afs=AfsConfig(half_life=3600.0, sampling=60.0))  # fmt: skip
    first = submit(
        model, workload("a1", "team", 2, queue="a"), workload("a2", "team", 2, queue="a")
    )
    model.schedule()
    for wl in first:
        model.finish(wl, True, "")
    submit(model, workload("a3", "team", 4, queue="a"), workload("b1", "team", 4, queue="b"))
    assert model.lq_usage(("team", "a")) > model.lq_usage(("team", "b")) == 0
    assert [wl.name for wl in model.pending_in_cq("team")] == ["b1", "a3"]
    model.schedule()
    assert admitted(model) == {"b1"}
