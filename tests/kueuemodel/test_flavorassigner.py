"""Flavor assignment: the first flavor of the queue's list that suits the pod set and has the
quota, borrowing when it must; Kueue's messages when none does; a plan gives the same answers."""

import random

import pytest

from kueuemodel import flavorassigner
from kueuemodel.resources import GPU
from tests.kueuemodel.builders import cluster_queue, flavor, model_of, workload

TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def test_flavors_are_tried_in_the_queues_order_and_borrowing_is_reported():
    model = model_of([cluster_queue("a", {"a100": 4, "h100": 4}),
                      cluster_queue("b", {"a100": 4, "h100": 4})],
                     flavors=("a100", "h100"))  # fmt: skip
    a = model.cqs["a"]
    assert model.assign(workload("w", "a", 4), a)[:2] == ([{GPU: "a100"}], False)
    model.charge(a, {("a100", GPU): 2}, +1)
    # a100 still fits, by borrowing 2 of b's idle GPUs: the first flavor that fits is taken.
    assert model.assign(workload("w", "a", 4), a)[:2] == ([{GPU: "a100"}], True)
    model.charge(model.cqs["b"], {("a100", GPU): 4}, +1)
    assert model.assign(workload("w", "a", 4), a)[:2] == ([{GPU: "h100"}], False)


def test_a_pod_set_that_fits_nowhere_gets_kueues_message_per_flavor():
    model = model_of([cluster_queue("a", {"a100": 4, "h100": 2}, cohort=None)],
                     flavors=("a100", "h100"))  # fmt: skip
    model.charge(model.cqs["a"], {("a100", GPU): 1}, +1)
    assignment, borrows, message = model.assign(workload("w", "a", 4), model.cqs["a"])
    assert (assignment, borrows) == (None, False)
    assert message == (
        "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu "
        "in flavor a100, 1 more needed; insufficient quota for nvidia.com/gpu in flavor h100, "
        "previously considered podsets requests (0) + current podset request (4) > maximum "
        "capacity (2)"
    )


def test_node_selectors_and_taints_rule_flavors_out():
    model = model_of([cluster_queue("a", {"tainted": 8, "a100": 8}, cohort=None)],
                     flavors=(flavor("tainted", taints=[TAINT]), "a100"))  # fmt: skip
    a = model.cqs["a"]
    assert model.assign(workload("w", "a", 1), a)[0] == [{GPU: "a100"}]
    tolerant = {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}
    assert model.assign(workload("w", "a", 1, spec=tolerant), a)[0] == [{GPU: "tainted"}]
    _, _, message = model.assign(workload("w", "a", 1, pool="h100"), a)
    assert message == (
        "couldn't assign flavors to pod set main: flavor tainted doesn't match node affinity; "
        "flavor a100 doesn't match node affinity"
    )
    _, _, message = model.assign(workload("w", "a", 1, pool="tainted"), a)
    assert message == (
        "couldn't assign flavors to pod set main: untolerated taint "
        "{nvidia.com/gpu=present:NoSchedule} in flavor tainted; flavor a100 doesn't match "
        "node affinity"
    )


def test_a_resource_no_group_covers_leaves_the_workload_pending():
    model = model_of([cluster_queue("a", {"a100": 8}, cohort=None)])
    wl = workload("w", "a", 1)
    wl.podsets[0].per_pod["example.com/fpga"] = 1
    _, _, message = model.assign(wl, model.cqs["a"])
    assert message == (
        "couldn't assign flavors to pod set main: resource example.com/fpga unavailable in "
        "ClusterQueue"
    )


@pytest.mark.parametrize("seed", range(5))
def test_a_plan_answers_as_the_full_assignment_does(seed):
    """plan_for() and the checks from it (used by the replay's strategy) give the flavor and
    the borrowing assign() gives, whatever the queues of a cohort hold."""
    rng = random.Random(seed)
    cqs = [cluster_queue(name, {"a100": (rng.randint(0, 8), rng.choice([None, 0, 2, 8]),
                                          rng.choice([None, 0, 2])),
                                "h100": rng.randint(0, 4)})
           for name in ("a", "b", "c")]  # fmt: skip
    model = model_of(cqs, flavors=("a100", "h100"))
    for _ in range(200):
        cq = model.cqs[rng.choice("abc")]
        model.charge(cq, {(rng.choice(["a100", "h100"]), GPU): rng.randint(-2, 3)}, +1)
        wl = workload("w", cq.name, rng.randint(1, 10), pool=rng.choice([None, "a100"]))
        plan = flavorassigner.plan_for(model, wl, cq)
        assert plan is not None
        full = flavorassigner.assign(model, wl, cq)
        quick = flavorassigner._assign_by_plan(wl, cq, plan)
        assert quick[:2] == full[:2]
        assert flavorassigner.fit(model, cq, plan, {}) == (
            (full[0][0][GPU], full[1]) if full[0] else (None, False)
        )


def test_a_plan_is_only_for_one_pod_set_without_a_topology():
    model = model_of([cluster_queue("a", {"a100": 8}, cohort=None)])
    wl = workload("w", "a", 1, topology={"required": "rack"})
    assert flavorassigner.plan_for(model, wl, model.cqs["a"]) is None
