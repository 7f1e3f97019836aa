"""Kueue's topology-aware scheduling in kubesim: a pod set that asks to stay within one rack is
admitted only where a rack holds it all, its pods are gated until placed and land there; a
preferred level spreads over the fewest domains; what cannot fit waits with Kueue's message."""

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from kubesim.testing import running_kubesim
from tests.kubesim.conftest import CRDS_DIR
from tests.kubesim.kueue_helpers import (
    cluster_queue,
    create,
    is_admitted,
    job,
    job_pods,
    local_queue,
    patch,
    pending_message,
    running_pods,
    wait_for,
)

BLOCK = "cloud.provider.com/topology-block"
RACK = "cloud.provider.com/topology-rack"
HOST = "kubernetes.io/hostname"
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"

# Eight 4-GPU nodes: block 0 holds rack 0 (nodes 0-1) and rack 1 (2-3), block 1 racks 2 and 3.
TOPOLOGY_FLEET = {
    "pools": [
        {
            "name": "h100",
            "gpuModel": "NVIDIA H100 80GB HBM3",
            "nodes": 8,
            "gpusPerNode": 4,
            "labels": {"accelerator": "nvidia-h100"},
            "topology": [{"label": BLOCK, "domains": 2}, {"label": RACK, "domains": 4}],
        }
    ]
}


@pytest.fixture
def tas():
    with running_kubesim(fleet=TOPOLOGY_FLEET, crds_dir=CRDS_DIR) as sim:
        api = config.new_client_from_config(sim.kubeconfig)
        client.CoreV1Api(api).create_namespace({"metadata": {"name": "team-a"}})
        create(api, "topologies", {"kind": "Topology", "metadata": {"name": "h100"},
                                   "spec": {"levels": [{"nodeLabel": BLOCK}, {"nodeLabel": RACK},
                                                       {"nodeLabel": HOST}]}})  # fmt: skip
        create(api, "resourceflavors", {"kind": "ResourceFlavor", "metadata": {"name": "h100"},
                                        "spec": {"nodeLabels": {"accelerator": "nvidia-h100"},
                                                 "topologyName": "h100"}})  # fmt: skip
        # More quota than GPUs: here the topology is what limits.
        cluster_queue(api, "cq", 64, flavor_name="h100")
        local_queue(api, "team-a", "lq", "cq")
        yield api
        api.close()


def _nodes(api, name, count):
    pods = wait_for(
        lambda: (
            len(p := running_pods(api, "team-a", name)) == count
            and all(x.spec.node_name for x in p)
            and p
        ),
        message=f"{count} running pods of {name}",
    )
    return sorted(int(p.spec.node_name.rsplit("-", 1)[1]) for p in pods)


def _racks(nodes):
    return {n // 2 for n in nodes}


def test_the_fleet_labels_nodes_with_nested_domains(tas):
    nodes = {n.metadata.name: n.metadata.labels for n in client.CoreV1Api(tas).list_node().items}
    assert nodes["h100-node-1"][RACK] == "h100-rack-0"
    assert nodes["h100-node-2"][RACK] == "h100-rack-1"
    assert nodes["h100-node-3"][BLOCK] == "h100-block-0"
    assert nodes["h100-node-4"][BLOCK] == "h100-block-1"
    assert nodes["h100-node-7"][RACK] == "h100-rack-3"


def test_a_required_rack_keeps_every_worker_in_one_rack(tas):
    # 3 workers x 2 GPUs: 6 GPUs fit in one rack (8), not on one node (4).
    job(tas, "team-a", "ring", workers=3, gpus=2, extra_annotations={REQUIRED: RACK})
    wl = wait_for(lambda: is_admitted(tas, "team-a", "ring"), message="admission")
    assert wl["spec"]["podSets"][0]["topologyRequest"]["required"] == RACK
    placement = wl["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"]
    assert placement["levels"] == [HOST]
    (piece,) = placement["slices"]
    # Kueue's compact form: the hosts' common prefix apart.
    each = piece["valuesPerLevel"][0]["individual"]
    assert each["prefix"] == "h100-node-"
    hosts = [each["prefix"] + root for root in each["roots"]]
    assert dict(zip(hosts, piece["podCounts"]["individual"], strict=True)) == {
        "h100-node-0": 2, "h100-node-1": 1,
    }  # fmt: skip
    assert _nodes(tas, "ring", 3) == [0, 0, 1]
    # Each pod was created gated and ungated with a node selector for its host.
    for pod in job_pods(tas, "team-a", "ring"):
        assert not pod.spec.scheduling_gates
        assert pod.spec.node_selector[HOST] == pod.spec.node_name
        assert pod.metadata.labels["kueue.x-k8s.io/tas"] == "true"


def test_a_job_no_rack_can_hold_waits_with_kueues_message_and_a_block_can_hold_it(tas):
    # 12 GPUs in 1-GPU workers: a rack has 8.
    job(tas, "team-a", "wide", workers=12, gpus=1, extra_annotations={REQUIRED: RACK})
    message = wait_for(lambda: pending_message(tas, "team-a", "wide"), message="pending")
    assert message == (
        'couldn\'t assign flavors to pod set main: topology "h100" allows to fit only 8 out of '
        "12 pod(s)"
    )
    assert not running_pods(tas, "team-a", "wide")
    # Within one block (16 GPUs) it fits, and stays in that block.
    job(tas, "team-a", "block", workers=12, gpus=1, extra_annotations={REQUIRED: BLOCK})
    nodes = _nodes(tas, "block", 12)
    assert set(nodes) <= {0, 1, 2, 3}


def test_preferred_uses_the_fewest_domains_and_capacity_is_held_per_domain(tas):
    job(tas, "team-a", "first", workers=3, gpus=2, extra_annotations={REQUIRED: RACK})
    assert _racks(_nodes(tas, "first", 3)) == {0}  # rack 0 keeps room for one 2-GPU pod
    # 8 GPUs preferred within a rack: racks 1-3 hold them; the first of the tightest.
    job(tas, "team-a", "second", workers=4, gpus=2, extra_annotations={PREFERRED: RACK})
    assert _racks(_nodes(tas, "second", 4)) == {1}
    # 10 GPUs preferred within a rack: no rack has room, block 1 has: it spans its two racks.
    job(tas, "team-a", "third", workers=5, gpus=2, extra_annotations={PREFERRED: RACK})
    assert _racks(_nodes(tas, "third", 5)) == {2, 3}
    # What is left: one 2-GPU pod in rack 0, three in rack 3. A required rack of 3 fits rack 3.
    job(tas, "team-a", "fourth", workers=3, gpus=2, extra_annotations={REQUIRED: RACK})
    assert _racks(_nodes(tas, "fourth", 3)) == {3}
    # Two more 2-GPU pods find room for only one anywhere, even when spread.
    job(tas, "team-a", "fifth", workers=2, gpus=2, extra_annotations={PREFERRED: RACK})
    assert wait_for(lambda: pending_message(tas, "team-a", "fifth"), message="pending") == (
        'couldn\'t assign flavors to pod set main: topology "h100" allows to fit only 1 out of '
        "2 pod(s)"
    )


def test_a_topology_aware_flavor_keeps_its_node_labels_as_kueue_requires(tas):
    with pytest.raises(ApiException) as refused:
        patch(tas, "resourceflavors", "h100", {"spec": {"nodeLabels": {"accelerator": "other"}}})
    assert refused.value.status == 422
    assert "nodeLabels are immutable when topologyName is set" in refused.value.body
