"""kubesim admits pods against ResourceQuotas as the API server does (403 Forbidden with the
real "exceeded quota" message) and keeps each quota's status.used, as the quota controller."""

import json
import time

import pytest
from kubernetes import client as k8s
from kubernetes import config
from kubernetes.client.rest import ApiException

from kubesim.testing import running_kubesim
from tests.fixtures_cluster import CRDS_DIR, SIM_FLEET


@pytest.fixture(scope="module")
def core():
    with running_kubesim(fleet=SIM_FLEET, crds_dir=CRDS_DIR) as sim:
        api = config.new_client_from_config(config_file=sim.kubeconfig)
        yield k8s.CoreV1Api(api)
        api.close()


def _pod(name, gpus):
    return {"metadata": {"name": name}, "spec": {
        "nodeSelector": {"accelerator": "nvidia-l4"},
        "containers": [{"name": "main", "image": "x",
                        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}  # fmt: skip


def test_a_pod_over_the_namespaces_quota_is_refused_with_the_api_servers_message(core):
    core.create_namespace({"metadata": {"name": "team-q"}})
    core.create_namespaced_resource_quota("team-q", {
        "metadata": {"name": "qm-guardrails"},
        "spec": {"hard": {"requests.nvidia.com/gpu": "2", "pods": "5"}},
    })  # fmt: skip
    core.create_namespaced_pod("team-q", _pod("first", 2))
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod("team-q", _pod("second", 1))
    assert refused.value.status == 403
    status = json.loads(refused.value.body)
    assert status["reason"] == "Forbidden"
    assert status["message"] == (
        'pods "second" is forbidden: exceeded quota: qm-guardrails, requested: '
        "requests.nvidia.com/gpu=1, used: requests.nvidia.com/gpu=2, "
        "limited: requests.nvidia.com/gpu=2"
    )
    # A pod without GPUs is admitted (pods are within their own limit).
    core.create_namespaced_pod("team-q", {"metadata": {"name": "cpu-only"}, "spec": {
        "containers": [{"name": "main", "image": "x"}]}})  # fmt: skip
    for _ in range(50):
        status = core.read_namespaced_resource_quota("qm-guardrails", "team-q").status
        if status and status.used and status.used.get("pods") == "2":
            break
        time.sleep(0.1)
    assert status.used == {"requests.nvidia.com/gpu": "2", "pods": "2"}
    assert status.hard == {"requests.nvidia.com/gpu": "2", "pods": "5"}
