"""MIG in kubesim (mixed strategy): a MIG node advertises its profile's instances as an extended
resource with GPU feature discovery's labels, Kueue admits against quota in that resource, the
scheduler hands out instances, and the DCGM exporter reports each instance (GPU_I_PROFILE,
GPU_I_ID) with the pod that holds it."""

import pytest
from kubernetes import client, config

from billing import dcgm as billing_dcgm
from kubesim.testing import running_kubesim
from tests.kubesim.conftest import CRDS_DIR
from tests.kubesim.kueue_helpers import (
    create,
    is_admitted,
    pending_message,
    running_pods,
    wait_for,
)

MIG = "nvidia.com/mig-1g.10gb"
MIG_FLEET = {
    "pools": [
        {
            "name": "mig",
            "gpuModel": "NVIDIA A100-SXM4-80GB",
            "nodes": 1,
            "gpusPerNode": 2,
            "labels": {"accelerator": "nvidia-a100-mig"},
            "mig": {"profile": "1g.10gb", "perGpu": 7},
        }
    ]
}


@pytest.fixture
def mig():
    with running_kubesim(fleet=MIG_FLEET, crds_dir=CRDS_DIR) as sim:
        api = config.new_client_from_config(sim.kubeconfig)
        client.CoreV1Api(api).create_namespace({"metadata": {"name": "team-a"}})
        flavor_spec = {"nodeLabels": {"accelerator": "nvidia-a100-mig"}}
        create(api, "resourceflavors", {"kind": "ResourceFlavor", "metadata": {"name": "mig"},
                                        "spec": flavor_spec})  # fmt: skip
        create(api, "clusterqueues", {"kind": "ClusterQueue", "metadata": {"name": "cq"}, "spec": {
            "namespaceSelector": {},
            "resourceGroups": [{"coveredResources": [MIG], "flavors": [
                {"name": "mig", "resources": [{"name": MIG, "nominalQuota": 4}]}]}],
        }})  # fmt: skip
        queue = {"kind": "LocalQueue", "metadata": {"name": "lq"}, "spec": {"clusterQueue": "cq"}}
        create(api, "localqueues", queue, namespace="team-a")
        sim.api = api
        yield sim
        api.close()


def _job(api, name, workers, instances):
    body = {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
        "spec": {"suspend": True, "parallelism": workers, "completions": workers,
                 "completionMode": "Indexed", "backoffLimit": 0, "template": {
                     "metadata": {"annotations": {"kubesim.dev/duration-seconds": "60"}},
                     "spec": {"restartPolicy": "Never", "containers": [{
                         "name": "main", "image": "x",
                         "resources": {"limits": {MIG: str(instances)}}}]}}},
    }  # fmt: skip
    client.BatchV1Api(api).create_namespaced_job("team-a", body)


def test_a_mig_node_advertises_instances_with_gpu_feature_discoverys_labels(mig):
    (node,) = client.CoreV1Api(mig.api).list_node().items
    assert node.status.capacity[MIG] == "14"
    assert "nvidia.com/gpu" not in node.status.capacity
    labels = node.metadata.labels
    assert labels["nvidia.com/mig.strategy"] == "mixed"
    assert labels["nvidia.com/mig-1g.10gb.count"] == "14"
    assert labels["nvidia.com/mig-1g.10gb.memory"] == "9728"


def test_mig_instances_are_admitted_bound_and_reported_per_instance(mig):
    _job(mig.api, "small", workers=3, instances=1)
    wait_for(lambda: is_admitted(mig.api, "team-a", "small"), message="admission")
    pods = wait_for(lambda: len(p := running_pods(mig.api, "team-a", "small")) == 3 and p,
                    message="three running pods")  # fmt: skip
    assert {p.spec.node_name for p in pods} == {"mig-node-0"}
    # Quota counts instances: 3 of 4 are in use, a job of two more waits.
    _job(mig.api, "over", workers=2, instances=1)
    message = wait_for(lambda: pending_message(mig.api, "team-a", "over"), message="pending")
    assert f"insufficient unused quota for {MIG} in flavor mig, 1 more needed" in message
    samples = billing_dcgm.scrape(f"{mig.url}/metrics/dcgm")
    ids = {s.sid for s in samples}
    assert len(ids) == 14 and {s.mig_profile for s in ids} == {"1g.10gb"}
    held = {s.pod: s.gpu_uuid for s in ids if s.pod}
    assert set(held) == {p.metadata.name for p in pods}
    assert all("/" in uuid for uuid in held.values())  # <GPU UUID>/<instance>
    assert len(set(held.values())) == 3
