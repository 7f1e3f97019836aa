"""Owner-reference cascade, status subresources, finalizers, persistence and the CLI."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kubernetes import client, config

from kubesim.testing import free_port, running_kubesim

REPO_ROOT = Path(__file__).resolve().parents[2]
CRDS_DIR = Path(os.environ.get("QM_SHARED_DIR", REPO_ROOT.parent / "shared")) / "crds"


def _job(name):
    return {
        "metadata": {"name": name},
        "spec": {
            "suspend": True,
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}
            },
        },
    }


def _owned_pod(name, owner):
    return {
        "metadata": {
            "name": name,
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": owner.metadata.name,
                    "uid": owner.metadata.uid,
                    "controller": True,
                }
            ],
        },
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }


def test_owner_reference_cascade(bare_k8s):
    namespace = "default"
    v1, batch = client.CoreV1Api(bare_k8s), client.BatchV1Api(bare_k8s)
    job = batch.create_namespaced_job(namespace, _job("train"))
    v1.create_namespaced_pod(namespace, _owned_pod("train-0", job))
    v1.create_namespaced_service(
        namespace,
        {
            "metadata": {
                "name": "train",
                "ownerReferences": _owned_pod("x", job)["metadata"]["ownerReferences"],
            },
            "spec": {"clusterIP": "None"},
        },
    )
    batch.delete_namespaced_job("train", namespace, propagation_policy="Background")
    assert v1.list_namespaced_pod(namespace).items == []
    assert v1.list_namespaced_service(namespace).items == []


def test_deleting_a_job_without_policy_orphans_its_pods_like_kubernetes(bare_k8s):
    namespace = "default"
    v1, batch = client.CoreV1Api(bare_k8s), client.BatchV1Api(bare_k8s)
    job = batch.create_namespaced_job(namespace, _job("train"))
    v1.create_namespaced_pod(namespace, _owned_pod("train-0", job))
    batch.delete_namespaced_job("train", namespace)
    pod = v1.read_namespaced_pod("train-0", namespace)
    assert not pod.metadata.owner_references


def test_deleting_a_namespace_deletes_its_contents(k8s, namespace):
    v1 = client.CoreV1Api(k8s)
    v1.create_namespaced_config_map(namespace, {"metadata": {"name": "c"}})
    v1.delete_namespace(namespace)
    assert (
        v1.list_config_map_for_all_namespaces(
            field_selector=f"metadata.namespace={namespace}"
        ).items
        == []
    )


def test_status_subresource_isolation(bare_k8s):
    batch = client.BatchV1Api(bare_k8s)
    batch.create_namespaced_job("default", _job("train"))

    # Writing the main resource ignores status...
    batch.patch_namespaced_job(
        "train", "default", {"spec": {"suspend": False}, "status": {"active": 3}}
    )
    job = batch.read_namespaced_job("train", "default")
    assert job.spec.suspend is False
    assert job.status is None or job.status.active is None
    assert job.metadata.generation == 2

    # ...and writing status ignores everything else, without bumping the generation.
    batch.patch_namespaced_job_status(
        "train", "default", {"spec": {"suspend": True}, "status": {"active": 2}}
    )
    job = batch.read_namespaced_job("train", "default")
    assert job.status.active == 2
    assert job.spec.suspend is False
    assert job.metadata.generation == 2


def test_custom_resource_status_subresource(bare_k8s):
    # Without controllers: kubesim's Kueue would rewrite this ClusterQueue's status itself.
    co = client.CustomObjectsApi(bare_k8s)
    group = ("kueue.x-k8s.io", "v1beta2")
    cq = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "cq"},
        "spec": {"namespaceSelector": {}},
        "status": {"pendingWorkloads": 5},
    }
    created = co.create_cluster_custom_object(*group, "clusterqueues", cq)
    assert "status" not in created or not created["status"].get("pendingWorkloads")
    co.patch_cluster_custom_object_status(
        *group, "clusterqueues", "cq", {"status": {"pendingWorkloads": 2}}
    )
    got = co.get_cluster_custom_object_status(*group, "clusterqueues", "cq")
    assert got["status"]["pendingWorkloads"] == 2


def test_finalizers_delay_deletion(k8s, namespace):
    v1 = client.CoreV1Api(k8s)
    v1.create_namespaced_config_map(
        namespace, {"metadata": {"name": "c", "finalizers": ["example.com/keep"]}}
    )
    v1.delete_namespaced_config_map("c", namespace)
    cm = v1.read_namespaced_config_map("c", namespace)
    assert cm.metadata.deletion_timestamp is not None
    v1.patch_namespaced_config_map("c", namespace, {"metadata": {"finalizers": None}})
    assert v1.list_namespaced_config_map(namespace).items == []


def test_state_survives_a_restart(tmp_path):
    state = tmp_path / "state.json"
    with running_kubesim(controllers=False, state=state) as ks:
        api = config.new_client_from_config(ks.kubeconfig)
        v1 = client.CoreV1Api(api)
        v1.create_namespace({"metadata": {"name": "team-a"}})
        created = v1.create_namespaced_config_map(
            "team-a", {"metadata": {"name": "c"}, "data": {"a": "1"}}
        )
        api.close()
    assert state.exists()
    with running_kubesim(controllers=False, state=state) as ks:
        api = config.new_client_from_config(ks.kubeconfig)
        v1 = client.CoreV1Api(api)
        cm = v1.read_namespaced_config_map("c", "team-a")
        assert cm.data == {"a": "1"}
        assert cm.metadata.uid == created.metadata.uid
        newer = v1.create_namespaced_config_map("team-a", {"metadata": {"name": "d"}})
        assert int(newer.metadata.resource_version) > int(created.metadata.resource_version)
        api.close()


@pytest.mark.slow
def test_cli_serve_writes_a_usable_kubeconfig(tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    state = tmp_path / "state.json"
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        "pools:\n  - name: a100\n    gpuModel: NVIDIA A100-SXM4-80GB\n    nodes: 2\n"
        "    gpusPerNode: 8\n    labels: {accelerator: nvidia-a100-80gb}\n"
    )
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kubesim",
            "serve",
            "--port",
            str(port),
            "--fleet",
            str(fleet),
            "--kubeconfig",
            str(kubeconfig),
            "--state",
            str(state),
            "--crds",
            str(CRDS_DIR),
        ],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        while not kubeconfig.exists() and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stdout.read()
            time.sleep(0.1)
        api = config.new_client_from_config(str(kubeconfig))
        nodes = client.CoreV1Api(api).list_node().items
        assert sorted(n.metadata.name for n in nodes) == ["a100-node-0", "a100-node-1"]
        assert nodes[0].status.allocatable["nvidia.com/gpu"] == "8"
        assert client.VersionApi(api).get_code().git_version.startswith("v1.")
        api.close()
    finally:
        proc.terminate()
        proc.wait(timeout=15)
    assert proc.returncode == 0
    assert state.exists()


def test_status_writes_are_recorded_in_managed_fields(bare_k8s):
    batch = client.BatchV1Api(bare_k8s)
    batch.create_namespaced_job("default", _job("train"))
    job = batch.patch_namespaced_job_status(
        "train", "default", {"status": {"active": 1}}, field_manager="job-controller"
    )
    entry = next(m for m in job.metadata.managed_fields if m.manager == "job-controller")
    assert entry.operation == "Update"
    assert entry.subresource == "status"
    assert entry.fields_v1 == {"f:status": {"f:active": {}}}


def test_removing_the_last_finalizer_deletes_and_cascades(bare_k8s):
    v1, batch = client.CoreV1Api(bare_k8s), client.BatchV1Api(bare_k8s)
    body = _job("train")
    body["metadata"]["finalizers"] = ["example.com/keep"]
    job = batch.create_namespaced_job("default", body)
    v1.create_namespaced_pod("default", _owned_pod("train-0", job))
    batch.delete_namespaced_job("train", "default", propagation_policy="Background")
    assert v1.read_namespaced_pod("train-0", "default")
    batch.patch_namespaced_job("train", "default", {"metadata": {"finalizers": None}})
    assert batch.list_namespaced_job("default").items == []
    assert v1.list_namespaced_pod("default").items == []
