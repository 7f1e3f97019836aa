"""kubesim's storage and pod configuration as the real components behave: claims are
provisioned and bound (default class, unknown class pending with ProvisioningFailed, resize), a
pod mounting a missing or unbound claim stays Pending with the scheduler's message until the
claim is bound, a container reading a missing Secret or key waits in CreateContainerConfigError
until it exists; Kueue leaves a workload requesting a resource its ClusterQueue does not cover
pending."""

import base64
import time

import pytest
from kubernetes import client as k8s
from kubernetes import config

from kubesim.testing import running_kubesim
from tests.fixtures_cluster import CRDS_DIR, SIM_FLEET


@pytest.fixture(scope="module")
def api():
    with running_kubesim(fleet=SIM_FLEET, crds_dir=CRDS_DIR) as sim:
        client = config.new_client_from_config(config_file=sim.kubeconfig)
        yield client
        client.close()


def wait_until(predicate, timeout=20.0):
    """The predicate's first truthy value (None after the timeout)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.1)
    return None


def _claim(name, *, size="10Gi", storage_class=None):
    spec = {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": size}}}
    if storage_class:
        spec["storageClassName"] = storage_class
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": "default"}, "spec": spec}  # fmt: skip


def _pod(name, *, claim=None, env=None):
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default",
                     "annotations": {"kubesim.dev/duration-seconds": "60"}},
        "spec": {"nodeSelector": {"accelerator": "nvidia-l4"}, "containers": [
            {"name": "main", "image": "x", "env": env or [],
             "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }  # fmt: skip
    if claim:
        pod["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
        pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    return pod


def _claim_phase(core, name):
    status = core.read_namespaced_persistent_volume_claim(name, "default").status
    return status.phase if status else None


def _phase(core, name):
    status = core.read_namespaced_pod(name, "default").status
    return status.phase if status else None


def _events(core, name):
    found = core.list_namespaced_event("default", field_selector=f"involvedObject.name={name}")
    return [(e.reason, e.message) for e in found.items]


def test_a_claim_is_bound_by_the_default_class_and_grows(api):
    core, storage = k8s.CoreV1Api(api), k8s.StorageV1Api(api)
    classes = storage.list_storage_class().items
    assert [c.metadata.name for c in classes] == ["standard"]
    assert classes[0].metadata.annotations["storageclass.kubernetes.io/is-default-class"] == "true"
    core.create_namespaced_persistent_volume_claim("default", _claim("data-a"))
    bound = wait_until(lambda: _claim_phase(core, "data-a") == "Bound" and (
        core.read_namespaced_persistent_volume_claim("data-a", "default")))  # fmt: skip
    assert bound.spec.storage_class_name == "standard"
    assert bound.spec.volume_name == f"pvc-{bound.metadata.uid}"
    assert bound.status.capacity == {"storage": "10Gi"}
    assert ("ProvisioningSucceeded", f"Successfully provisioned volume {bound.spec.volume_name}") \
        in _events(core, "data-a")  # fmt: skip
    core.patch_namespaced_persistent_volume_claim(
        "data-a", "default", {"spec": {"resources": {"requests": {"storage": "20Gi"}}}}
    )
    assert wait_until(
        lambda: (
            core.read_namespaced_persistent_volume_claim("data-a", "default").status.capacity
            == {"storage": "20Gi"}
        )
    )


def test_a_claim_of_an_unknown_class_stays_pending_until_the_class_exists(api):
    core, storage = k8s.CoreV1Api(api), k8s.StorageV1Api(api)
    core.create_namespaced_persistent_volume_claim(
        "default", _claim("fast-a", storage_class="fast")
    )
    assert wait_until(lambda: ("ProvisioningFailed",
                               'storageclass.storage.k8s.io "fast" not found')
                      in _events(core, "fast-a"))  # fmt: skip
    assert _claim_phase(core, "fast-a") == "Pending"
    storage.create_storage_class(
        {"metadata": {"name": "fast"}, "provisioner": "kubesim.dev/hostpath"}
    )
    assert wait_until(
        lambda: (
            core.read_namespaced_persistent_volume_claim("fast-a", "default").status.phase
            == "Bound"
        )
    )


def test_a_pod_waits_for_its_claim_with_the_schedulers_message(api):
    core = k8s.CoreV1Api(api)
    core.create_namespaced_pod("default", _pod("reader", claim="later"))

    def scheduled_condition():
        status = core.read_namespaced_pod("reader", "default").status
        conditions = (status.conditions if status else None) or []
        return next((c for c in conditions if c.type == "PodScheduled"), None)

    condition = wait_until(scheduled_condition)
    assert condition.status == "False"
    assert 'persistentvolumeclaim "later" not found' in condition.message
    assert condition.message.startswith("0/") and "Preemption is not helpful" in condition.message
    assert core.read_namespaced_pod("reader", "default").spec.node_name is None
    core.create_namespaced_persistent_volume_claim("default", _claim("later"))
    assert wait_until(lambda: _phase(core, "reader") == "Running")


def test_a_container_waits_for_its_secret_and_key(api):
    core = k8s.CoreV1Api(api)
    env = [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}}]
    core.create_namespaced_pod("default", _pod("needs-secret", env=env))

    def waiting():
        status = core.read_namespaced_pod("needs-secret", "default").status
        statuses = (status.container_statuses if status else None) or []
        return statuses and statuses[0].state.waiting

    assert wait_until(lambda: (w := waiting()) and w.message == 'secret "creds" not found')
    assert waiting().reason == "CreateContainerConfigError"
    assert ("Failed", 'Error: secret "creds" not found') in _events(core, "needs-secret")
    secret = {"metadata": {"name": "creds"}, "data": {"other": base64.b64encode(b"x").decode()}}
    core.create_namespaced_secret("default", secret)
    assert wait_until(
        lambda: (w := waiting()) and w.message == "couldn't find key token in Secret default/creds"
    )
    core.patch_namespaced_secret(
        "creds", "default", {"data": {"token": base64.b64encode(b"t").decode()}}
    )
    assert wait_until(lambda: _phase(core, "needs-secret") == "Running")


def test_a_missing_image_pull_secret_is_warned_about_and_the_pod_still_starts(api):
    core = k8s.CoreV1Api(api)
    pod = _pod("pulls")
    pod["spec"]["imagePullSecrets"] = [{"name": "registry-creds"}]
    core.create_namespaced_pod("default", pod)
    assert wait_until(lambda: _phase(core, "pulls") == "Running")
    time.sleep(0.2)
    assert (
        "FailedToRetrieveImagePullSecret",
        "Unable to retrieve some image pull secrets (registry-creds); attempting to pull the "
        "image may not succeed.",
    ) in _events(core, "pulls")
