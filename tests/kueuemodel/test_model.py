"""The model's state and transitions: what the listener hears, Workloads restored from their
status, configuration changes, stop policies."""

from kueuemodel.resources import GPU
from tests.kueuemodel.builders import admitted, cluster_queue, model_of, submit, workload


def _workload_object(name, ns, gpus, **status) -> dict:
    template = {"spec": {"containers": [{"name": "c", "resources": {"limits": {GPU: gpus}}}]}}
    return {"metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}",
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"queueName": "lq", "priority": 0,
                     "podSets": [{"name": "main", "count": 1, "template": template}]},
            "status": status}  # fmt: skip


def test_the_listener_hears_each_transition_after_the_model_made_it():
    model = model_of([cluster_queue("a", {"a100": 2}, cohort=None)])
    first, second = submit(model, workload("first", "a", 2), workload("second", "a", 2))
    model.schedule()
    model.finish(first, True, "done")
    model.schedule()
    assert model.listener.seen == [
        ("admitted", "first", "a", ("a100",)),
        ("pending", "second", "couldn't assign flavors to pod set main: insufficient unused "
                              "quota for nvidia.com/gpu in flavor a100, 2 more needed"),
        ("finished", "first", True),
        ("admitted", "second", "a", ("a100",)),
    ]  # fmt: skip
    assert model.cqs["a"].usage[("a100", GPU)] == 2 and model.admissions == 2


def test_a_workload_admitted_before_keeps_its_quota_when_read_back():
    """A restarted Kueue reads admissions from the Workloads' status: their usage is charged
    and nothing is admitted twice."""
    model = model_of([cluster_queue("a", {"a100": 4}, cohort=None)])
    assignment = {"name": "main", "flavors": {GPU: "a100"}}
    admission = {"clusterQueue": "a", "podSetAssignments": [assignment]}
    conditions = [{"type": "QuotaReserved", "status": "True"}]
    held = model.add_workload(_workload_object("held", "a", 3, admission=admission,
                                               conditions=conditions))  # fmt: skip
    done = model.add_workload(_workload_object("done", "a", 4, conditions=[
        {"type": "Finished", "status": "True"}]))  # fmt: skip
    waiting = model.add_workload(_workload_object("waiting", "a", 2))
    assert (held.state, done.state, waiting.state) == ("admitted", "finished", "pending")
    assert held.usage == {("a100", GPU): 3} and model.available(model.cqs["a"], "a100", GPU) == 1
    model.schedule()
    assert admitted(model) == {"held"}
    model.forget(held)
    model.schedule()
    assert admitted(model) == {"waiting"}


def test_a_deactivated_workload_leaves_and_comes_back():
    model = model_of([cluster_queue("a", {"a100": 2}, cohort=None)])
    (wl,) = submit(model, workload("w", "a", 2))
    model.schedule()
    model.update_workload(wl, {"active": False})
    assert wl.state == "inactive" and model.listener.of("evicted") == [
        ("w", "Deactivated", None, False)]  # fmt: skip
    assert model.cqs["a"].usage[("a100", GPU)] == 0
    model.update_workload(wl, {"active": True})
    model.schedule()
    assert wl.state == "admitted"


def test_hold_and_drain_evicts_what_was_admitted():
    model = model_of([cluster_queue("a", {"a100": 4}, cohort=None)])
    submit(model, workload("w", "a", 2))
    model.schedule()
    model.set_cluster_queue("a", cluster_queue("a", {"a100": 4}, cohort=None,
                                               stopPolicy="HoldAndDrain"))  # fmt: skip
    model.schedule()  # rebuilds, drains, admits nothing while stopped
    assert admitted(model) == set()
    assert model.listener.of("evicted") == [("w", "ClusterQueueStopped", None, True)]


def test_a_queue_naming_a_missing_flavor_admits_nothing():
    model = model_of([cluster_queue("a", {"gone": 4}, cohort=None)])
    assert model.cqs["a"].missing_flavors == ["gone"] and not model.cqs["a"].is_active
    submit(model, workload("w", "a", 1))
    model.schedule()
    assert model.listener.of("pending") == [("w", "ClusterQueue a is inactive")]


def test_a_configuration_change_keeps_what_is_admitted_and_requeues_the_rest():
    model = model_of([cluster_queue("a", {"a100": 2}), cluster_queue("b", {"a100": 2})])
    submit(model, workload("in", "a", 2), workload("out", "a", 4))
    model.schedule()
    assert admitted(model) == {"in"}  # out needs b's 2 and its own, held by "in"
    model.set_cluster_queue("b", cluster_queue("b", {"a100": 6}))
    model.schedule()
    assert admitted(model) == {"in", "out"}
    assert model.cohorts["dept"].usage[("a100", GPU)] == 6  # all of it: a keeps none back
