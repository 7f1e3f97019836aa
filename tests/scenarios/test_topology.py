"""Kueue's topology-aware scheduling on the fleet's A100 pool (4 nodes of 8 GPUs in 2 racks):
a pod set that requires a rack is admitted only where one rack holds all of it and its pods land
there; one that prefers a rack spreads over as few as it can; what no rack can hold waits with
Kueue's message; a topology flavor's node labels are fixed. It applies to every pod set Kueue
admits: a batch Job's, a PyTorchJob's replicas and a JobSet's replicated jobs (Kueue's
"Topology Aware Scheduling" page and its TAS e2e tests)."""

from __future__ import annotations

import pytest
from kubernetes.client.rest import ApiException

from tests.scenarios import objects as o
from tests.scenarios.objects import GPU, GPU_TOLERATION, HOST, RACK


@pytest.fixture
def tas(sc):
    """A Topology (rack, host), its flavor over the A100 pool, and a queue of 64 GPUs (more
    than the pool holds: the topology is what limits)."""
    ns = sc.namespace()
    topology, flavor, cq = sc.unique("racks"), sc.unique("a100-tas"), sc.unique("cq")
    sc.create(o.topology(topology, [RACK, HOST]))
    sc.create(o.flavor(flavor, "a100", tolerations=[GPU_TOLERATION], topology=topology))
    sc.create(o.cluster_queue(cq, {flavor: [o.quota(64)]}, namespaces=[ns]))
    sc.create(o.local_queue("lq", cq), ns)
    sc.topology_name, sc.tas_flavor, sc.tas_ns = topology, flavor, ns
    return ns


def _racks(sc, ns, selector, count) -> list[str]:
    pods = sc.wait_running(ns, selector, count)
    nodes = {n.metadata.name: n.metadata.labels for n in sc.core.list_node().items}
    return sorted(nodes[p.spec.node_name][RACK] for p in pods)


def _hosts(assignment: dict) -> dict[str, int]:
    """host -> pods of a v1beta2 topologyAssignment whose lowest level is the host."""
    out: dict[str, int] = {}
    for piece in assignment["slices"]:
        values = piece["valuesPerLevel"][-1]
        if "universal" in values:
            names = [values["universal"]] * piece["domainCount"]
        else:
            each = values["individual"]
            names = [each.get("prefix", "") + root + each.get("suffix", "")
                     for root in each["roots"]]  # fmt: skip
        counts = piece["podCounts"]
        per = counts.get("individual") or [counts.get("universal")] * piece["domainCount"]
        out.update(zip(names, per, strict=True))
    return out


def _topology(kind: str) -> dict:
    return {f"kueue.x-k8s.io/podset-{kind}-topology": RACK}


def test_a_required_rack_keeps_every_pod_in_one_rack(sc, cluster, tas):
    # 3 pods of 4 GPUs: 12 fit in a rack (16), not on a node (8).
    sc.create(o.job("ring", "lq", {GPU: 4}, workers=3,
                    annotations={**cluster.runs(600), **_topology("required")}), tas)  # fmt: skip
    wl = sc.wait_admitted(tas, "ring")
    assert wl["spec"]["podSets"][0]["topologyRequest"]["required"] == RACK
    assignment = wl["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"]
    assert assignment["levels"] == [HOST]
    # Kueue's compact encoding: one slice, the hosts' common prefix apart, counts per host.
    (piece,) = assignment["slices"]
    assert piece["domainCount"] == 2
    assert piece["valuesPerLevel"][0]["individual"]["prefix"] == "a100-node-"
    hosts = _hosts(assignment)
    assert sorted(hosts.values()) == [1, 2]
    racks = _racks(sc, tas, "job-name=ring", 3)
    assert len(set(racks)) == 1
    # Each pod was created gated and released with a node selector for its host.
    for pod in sc.pods(tas, "job-name=ring"):
        assert not pod.spec.scheduling_gates
        assert pod.spec.node_selector[HOST] == pod.spec.node_name
        assert pod.spec.node_name in hosts
        assert pod.metadata.annotations["kueue.x-k8s.io/workload"] == wl["metadata"]["name"]


def test_what_no_rack_can_hold_waits_with_kueues_message(sc, cluster, tas):
    sc.create(o.job("wide", "lq", {GPU: 1}, workers=20,
                    annotations={**cluster.runs(600), **_topology("required")}), tas)  # fmt: skip
    assert sc.wait_pending(tas, "wide") == (
        f'couldn\'t assign flavors to pod set main: topology "{sc.topology_name}" allows to fit '
        "only 16 out of 20 pod(s)"
    )
    assert not sc.pods(tas, "job-name=wide")


def test_a_preferred_rack_spreads_over_the_fewest_racks_when_one_is_not_enough(sc, cluster, tas):
    sc.create(o.job("most", "lq", {GPU: 1}, workers=20,
                    annotations={**cluster.runs(600), **_topology("preferred")}), tas)  # fmt: skip
    sc.wait_admitted(tas, "most")
    racks = _racks(sc, tas, "job-name=most", 20)
    assert sorted(racks.count(r) for r in set(racks)) == [4, 16]


def test_a_pytorchjobs_replicas_are_placed_by_topology(sc, cluster, tas):
    # A master and 2 workers of 4 GPUs each, required within a rack.
    body = o.pytorch_job("ddp", "lq", 4, workers=2, annotations={**cluster.runs(600),
                         **_topology("required")}, tolerations=[GPU_TOLERATION])  # fmt: skip
    sc.create(body, tas)
    wl = sc.wait_admitted(tas, "ddp", kind="PyTorchJob")
    requests = {p["name"]: (p.get("topologyRequest") or {}) for p in wl["spec"]["podSets"]}
    assert {name: r.get("required") for name, r in requests.items()} == {
        "master": RACK, "worker": RACK}  # fmt: skip
    for assignment in wl["status"]["admission"]["podSetAssignments"]:
        assert assignment["topologyAssignment"]["levels"] == [HOST]
    sc.wait_running(tas, "training.kubeflow.org/job-name=ddp", 3)
    # Each pod set within a rack (the workers' two pods in one).
    workers = "training.kubeflow.org/job-name=ddp,training.kubeflow.org/replica-type=worker"
    assert len(set(_racks(sc, tas, workers, 2))) == 1
    for pod in sc.pods(tas, "training.kubeflow.org/job-name=ddp"):
        assert pod.spec.node_selector[HOST] == pod.spec.node_name


def test_a_jobsets_replicated_jobs_are_placed_by_topology(sc, cluster, tas):
    # Two child Jobs of 2 pods of 4 GPUs, the replicated job required within a rack.
    replicated = o.replicated_job("workers", {GPU: 4}, replicas=2, pods=2,
                                  annotations={**cluster.runs(600), **_topology("required")},
                                  tolerations=[GPU_TOLERATION])  # fmt: skip
    sc.create(o.job_set("ring", "lq", [replicated]), tas)
    wl = sc.wait_admitted(tas, "ring", kind="JobSet")
    (podset,) = wl["spec"]["podSets"]
    assert (podset["name"], podset["count"]) == ("workers", 4)
    assert podset["topologyRequest"]["required"] == RACK
    racks = _racks(sc, tas, "jobset.sigs.k8s.io/jobset-name=ring", 4)
    assert len(set(racks)) == 1


def test_a_topology_flavors_node_labels_are_fixed(sc, tas):
    with pytest.raises(ApiException) as refused:
        sc.patch("ResourceFlavor", sc.tas_flavor, {"spec": {"nodeLabels": {"accelerator": "x"}}})
    assert refused.value.status == 422
    assert "nodeLabels are immutable when topologyName is set" in refused.value.body


def test_the_fleet_labels_each_node_with_its_rack(sc):
    nodes = {n.metadata.name: n.metadata.labels for n in sc.core.list_node().items}
    assert [nodes[f"a100-node-{i}"][RACK] for i in range(4)] == [
        "a100-rack-0", "a100-rack-0", "a100-rack-1", "a100-rack-1"]  # fmt: skip
