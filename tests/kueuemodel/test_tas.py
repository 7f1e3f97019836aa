"""Topology-aware scheduling in the model: a pod set that must stay within one rack is admitted
only where a rack holds it all, in the tightest rack; a preferred level spreads over the fewest
domains; the admission's topologyAssignment reads back as it was."""

from kueuemodel import tas
from kueuemodel.resources import GPU
from tests.kueuemodel.builders import cluster_queue, flavor, model_of, submit, workload

BLOCK, RACK, HOST = "block", "rack", tas.HOSTNAME


def _node(name: str, block: str, rack: str, gpus: int = 4) -> dict:
    return {"metadata": {"name": name, "labels": {BLOCK: block, RACK: rack, HOST: name,
                                                  "pool": "h100"}},
            "spec": {},
            "status": {"allocatable": {GPU: str(gpus)},
                       "conditions": [{"type": "Ready", "status": "True"}]}}  # fmt: skip


def _model():
    model = model_of([cluster_queue("a", {"h100": 64}, cohort=None)],
                     flavors=(flavor("h100", topology="h100"),))  # fmt: skip
    model.set_topology("h100", {"spec": {"levels": [{"nodeLabel": BLOCK}, {"nodeLabel": RACK},
                                                    {"nodeLabel": HOST}]}})  # fmt: skip
    # Rack r0: two 4-GPU nodes; rack r1: one 4-GPU node and one with 2 GPUs free.
    for name, rack, gpus in (("n0", "r0", 4), ("n1", "r0", 4), ("n2", "r1", 4), ("n3", "r1", 2)):
        model.node_event("ADDED", _node(name, "b0", rack, gpus))
    return model


def test_a_required_rack_takes_the_tightest_rack_that_holds_every_pod():
    model = _model()
    (wl,) = submit(model, workload("w", "a", 1, count=6, topology={"required": RACK}))
    model.schedule()
    assert wl.state == "admitted"
    topo, plan = wl.tas[0]
    assert topo == "h100" and plan == {("b0", "r1", "n2"): 4, ("b0", "r1", "n3"): 2}
    assignment = tas.topology_assignment(model.topologies["h100"], plan)
    assert tas.read_assignment(assignment, model.topologies["h100"], model.nodes) == plan


def test_a_pod_set_no_rack_holds_waits_with_kueues_message():
    model = _model()
    submit(model, workload("w", "a", 1, count=9, topology={"required": RACK}))
    model.schedule()
    assert model.listener.of("pending") == [(
        "w", 'couldn\'t assign flavors to pod set main: topology "h100" allows to fit only 8 '
             "out of 9 pod(s)")]  # fmt: skip
    assert model.tas_blocked == {"a"}
    # A new node in rack r0 lets the queue try again.
    model.node_event("ADDED", _node("n4", "b0", "r0"))
    model.schedule()
    assert model.workloads[("a", "w")].state == "admitted"


def test_a_preferred_rack_spreads_over_as_few_domains_as_it_must():
    assert tas.place([BLOCK, RACK], {("b0", "r0"): 3, ("b0", "r1"): 2, ("b1", "r2"): 4},
                     count=6, request={"preferred": RACK}) == (
        {("b0", "r0"): 3, ("b0", "r1"): 2, ("b1", "r2"): 1}, 6)  # fmt: skip
    assert tas.place([BLOCK, RACK], {("b0", "r0"): 3, ("b1", "r2"): 4}, count=4,
                     request={"required": RACK}) == ({("b1", "r2"): 4}, 4)  # fmt: skip
