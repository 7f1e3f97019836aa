"""Time-slicing in kubesim: a time-sliced node advertises each GPU `replicas` times with the
device plugin's and GPU feature discovery's labels, pods share a GPU, and the DCGM exporter
reports one series per replica (vgpu) with the pod that holds it."""

from kubernetes import client, config

from billing import dcgm as billing_dcgm
from kubesim.testing import running_kubesim
from tests.kubesim.conftest import CRDS_DIR
from tests.kubesim.kueue_helpers import wait_for

SLICED_FLEET = {
    "pools": [
        {"name": "l4", "gpuModel": "NVIDIA L4", "nodes": 1, "gpusPerNode": 1,
         "labels": {"accelerator": "nvidia-l4"}, "timeSlicing": {"replicas": 4}},
    ]
}  # fmt: skip


def _pod(name):
    container = {"name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    annotations = {"kubesim.dev/duration-seconds": "60"}
    return {"metadata": {"name": name, "annotations": annotations},
            "spec": {"containers": [container]}}  # fmt: skip


def test_pods_share_a_time_sliced_gpu_and_each_replica_is_reported():
    with running_kubesim(fleet=SLICED_FLEET, crds_dir=CRDS_DIR) as sim:
        api = config.new_client_from_config(sim.kubeconfig)
        core = client.CoreV1Api(api)
        (node,) = core.list_node().items
        assert node.status.capacity["nvidia.com/gpu"] == "4"
        labels = node.metadata.labels
        assert labels["nvidia.com/gpu.replicas"] == "4"
        assert labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
        assert labels["nvidia.com/gpu.product"] == "NVIDIA-L4-SHARED"
        for name in ("a", "b"):
            core.create_namespaced_pod("default", _pod(name))
        wait_for(lambda: all(core.read_namespaced_pod(n, "default").status.phase == "Running"
                             for n in ("a", "b")), message="both running")  # fmt: skip
        samples = billing_dcgm.scrape(f"{sim.url}/metrics/dcgm")
        ids = {s.sid for s in samples}
        assert len(ids) == 4 and {s.mig_profile for s in ids} == {"time-slice"}
        held = {s.pod: s.gpu_uuid for s in ids if s.pod}
        assert set(held) == {"a", "b"}
        # Two replicas of the one physical GPU.
        assert len({u.rsplit("/", 1)[0] for u in held.values()}) == 1
        assert len(set(held.values())) == 2
        api.close()
