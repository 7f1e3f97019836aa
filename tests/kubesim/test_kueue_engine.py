"""Quota arithmetic of kubesim's Kueue engine, without HTTP (the model only)."""

import pytest

from kubesim.kueue import KueueEngine
from kubesim.store import Store
from kueuemodel.types import CQ, WL, PodSet

GPU = "nvidia.com/gpu"


def _cq(name, nominal, *, cohort="dept", borrowing=None, lending=None, flavors=("a100",)):
    resources = {"name": GPU, "nominalQuota": nominal}
    if borrowing is not None:
        resources["borrowingLimit"] = borrowing
    if lending is not None:
        resources["lendingLimit"] = lending
    return {
        "metadata": {"name": name},
        "spec": {
            "cohortName": cohort,
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": [GPU],
                    "flavors": [{"name": f, "resources": [dict(resources)]} for f in flavors],
                }
            ],
        },
    }


@pytest.fixture
def engine():
    eng = KueueEngine(Store(system_namespaces=False))
    eng.flavors = {"a100": {"spec": {}}, "h100": {"spec": {}}}
    return eng


def _load(engine, *cqs):
    engine.cq_objs = {obj["metadata"]["name"]: obj for obj in cqs}
    engine.rebuild()


def _use(engine, name, units, flavor="a100"):
    engine._charge(engine.cqs[name], {(flavor, GPU): units}, +1)


def _wl(*podsets):
    sets = [PodSet(f"ps{i}", count, {GPU: per_pod}, {}) for i, (count, per_pod) in
            enumerate(podsets)]  # fmt: skip
    return WL("ns", "wl", "uid", "lq", 0, "", 1, sets)


def test_borrowing_is_capped_by_borrowing_limit_and_by_what_others_leave(engine):
    _load(engine, _cq("a", 4, borrowing=2), _cq("b", 4))
    a, b = engine.cqs["a"], engine.cqs["b"]
    assert engine.available(a, "a100", GPU) == 6  # own 4 + borrowing limit 2
    assert engine.available(b, "a100", GPU) == 8  # no borrowing limit: the whole cohort
    _use(engine, "b", 3)
    assert engine.available(a, "a100", GPU) == 5  # only 1 of b's unused GPUs is left to borrow
    assert engine.capacity(a, "a100", GPU) == 6


def test_lending_limit_keeps_part_of_the_quota_for_its_owner(engine):
    _load(engine, _cq("a", 4), _cq("b", 4, lending=1))
    a, b = engine.cqs["a"], engine.cqs["b"]
    assert engine.available(a, "a100", GPU) == 5  # own 4 + the 1 GPU b lends
    _use(engine, "a", 5)
    # b still has the 3 GPUs it does not lend, but nothing of the shared pool.
    assert engine.available(b, "a100", GPU) == 3
    dept = engine.cohorts["dept"]  # what the cohort can lend, and what of it is used
    assert (dept.subtree[("a100", GPU)], dept.usage[("a100", GPU)]) == (5, 5)


def test_without_a_cohort_only_nominal_quota_counts(engine):
    _load(engine, _cq("solo", 4, cohort=None))
    solo = engine.cqs["solo"]
    _use(engine, "solo", 3)
    assert engine.available(solo, "a100", GPU) == 1
    assert engine.capacity(solo, "a100", GPU) == 4


def test_flavors_are_tried_in_order_and_the_shortfall_is_reported(engine):
    _load(engine, _cq("solo", 4, cohort=None, flavors=("a100", "h100")))
    solo = engine.cqs["solo"]
    _use(engine, "solo", 2, "a100")
    assignment, borrows, _ = engine.assign(_wl((1, 3)), solo)
    assert assignment == [{GPU: "h100"}] and not borrows
    _use(engine, "solo", 3, "h100")
    assignment, _, message = engine.assign(_wl((1, 3)), solo)
    assert assignment is None
    assert message == (
        "couldn't assign flavors to pod set ps0: insufficient unused quota for nvidia.com/gpu "
        "in flavor a100, 1 more needed; insufficient unused quota for nvidia.com/gpu in flavor "
        "h100, 2 more needed"
    )


def test_capacity_message_names_earlier_pod_sets(engine):
    _load(engine, _cq("solo", 4, cohort=None))
    _, _, message = engine.assign(_wl((1, 3), (1, 2)), engine.cqs["solo"])
    assert message == (
        "couldn't assign flavors to pod set ps1: insufficient quota for nvidia.com/gpu in flavor "
        "a100, previously considered podsets requests (3) + current podset request (2) > "
        "maximum capacity (4)"
    )


def test_cluster_queue_parses_v1beta1_cohort_field():
    obj = _cq("old", 2)
    obj["spec"]["cohort"] = obj["spec"].pop("cohortName")
    assert CQ(obj).cohort == "dept"
