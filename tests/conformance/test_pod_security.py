"""The portal's Pod Security settings hold against the real API server's Pod Security admission:
a team namespace labelled as the portal labels it (baseline enforced, restricted warned) admits
the pods of every job kind the portal renders, and refuses a privileged pod; an exempt team's
namespace admits it. kubesim's imitation of the admission (kubesim/podsecurity.py) refuses what
the API server refuses, in its words.

Pods are created with a server-side dry run: admission runs in full, nothing is stored, so no
scheduler or kubelet is involved and the test says only what the API server decides."""

from __future__ import annotations

import copy
import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from cluster.testing import unique_name, wait_for
from kubesim.resources import NAMESPACES, PODS
from kubesim.store import Forbidden, Store
from queues.manifests.quotas import namespace_manifest
from tests.queues.builders import job_world_setup, pod_template_specs, render_every_job_kind

pytestmark = pytest.mark.django_db


@pytest.fixture
def team_namespace(kube, world):
    """Team vision (and the world its jobs need: tiers, pools, quota) in a namespace of its own
    on the real cluster, labelled as the portal labels it; yields (world, namespace name)."""
    world = job_world_setup(world)
    team = world["vision"]
    team.namespace = unique_name("psa")
    team.save(update_fields=["namespace"])
    core = client.CoreV1Api(kube)
    core.create_namespace(namespace_manifest(team))
    # The service account admission wants the namespace's default account to exist.
    wait_for(
        lambda: core.list_namespaced_service_account(team.namespace).items,
        timeout=30, what=f"the default service account of {team.namespace}",
    )  # fmt: skip
    yield world, team.namespace
    core.delete_namespace(team.namespace)


def _relabel(kube, team) -> None:
    labels = namespace_manifest(team)["metadata"]["labels"]
    client.CoreV1Api(kube).patch_namespace(team.namespace, {"metadata": {"labels": labels}})


def _create_pod(kube, namespace: str, name: str, spec: dict) -> list[str]:
    """Create the pod with a server-side dry run; returns the API server's warnings (raises
    ApiException when admission refuses it)."""
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}
    answer = client.CoreV1Api(kube).create_namespaced_pod(
        namespace, body, dry_run="All", _preload_content=False
    )
    assert json.loads(answer.data)["metadata"]["name"] == name
    return list(answer.headers.get_all("Warning") or [])


def _privileged(spec: dict) -> dict:
    spec = copy.deepcopy(spec)
    spec["containers"][0]["securityContext"] = {"privileged": True}
    return spec


def test_a_baseline_team_namespace_admits_every_rendered_pod_and_refuses_a_privileged_one(
    kube, team_namespace, settings
):
    world, namespace = team_namespace
    objects = render_every_job_kind(world)
    kinds = {(o["apiVersion"], o["kind"]) for o in objects}
    assert {
        ("batch/v1", "Job"), ("kubeflow.org/v1", "PyTorchJob"),
        ("jobset.x-k8s.io/v1alpha2", "JobSet"), ("batch.volcano.sh/v1alpha1", "Job"),
    } <= kinds  # fmt: skip
    specs = [spec for obj in objects for spec in pod_template_specs(obj)]
    assert len(specs) >= 7  # job, indexed, master and worker, driver and workers, volcano task
    for n, spec in enumerate(specs):
        warnings = _create_pod(kube, namespace, f"rendered-{n}", spec)
        # Restricted is warned about, and the portal's defaults leave it nothing to say but
        # that the image's user is not known to be non-root.
        (restricted,) = [w for w in warnings if "would violate PodSecurity" in w]
        assert "restricted:latest" in restricted
        assert "runAsNonRoot" in restricted
        for default in ("allowPrivilegeEscalation", "unrestricted capabilities", "seccompProfile"):
            assert default not in restricted, (n, restricted)

    with pytest.raises(ApiException) as refused:
        _create_pod(kube, namespace, "root", _privileged(specs[0]))
    assert refused.value.status == 403
    message = json.loads(refused.value.body)["message"]
    version = settings.POD_SECURITY_VERSION
    assert f'violates PodSecurity "baseline:{version}"' in message
    assert "privileged" in message
    # kubesim refuses the same pod in a namespace labelled alike, in the same words.
    store = Store()
    store.create(NAMESPACES, namespace_manifest(world["vision"]))
    pod = {"metadata": {"name": "root", "namespace": namespace}, "spec": _privileged(specs[0])}
    with pytest.raises(Forbidden) as sim_refused:
        store.create(PODS, pod)
    assert sim_refused.value.message == message


def test_an_exempt_teams_namespace_admits_a_privileged_pod(kube, team_namespace):
    world, namespace = team_namespace
    team = world["vision"]
    spec = {"containers": [{"name": "main", "image": "busybox"}]}
    with pytest.raises(ApiException) as refused:
        _create_pod(kube, namespace, "root", _privileged(spec))
    assert refused.value.status == 403
    team.pod_security_exempt, team.pod_security_exempt_reason = True, "perf counters"
    _relabel(kube, team)
    _create_pod(kube, namespace, "root", _privileged(spec))


def _container(name: str = "main", **fields) -> dict:
    return {"name": name, "image": "busybox", **fields}


# Pods that break the baseline in many ways at once (each is valid otherwise: the API server
# checks the pod's fields before its admission).
BAD_PODS = {
    "privileged-host-network": {
        "hostNetwork": True,
        "containers": [_container(securityContext={"privileged": True})],
        "volumes": [{"name": "root", "hostPath": {"path": "/"}}],
    },
    "everything": {
        "hostPID": True,
        "hostIPC": True,
        "securityContext": {
            "seccompProfile": {"type": "Unconfined"},
            "seLinuxOptions": {"type": "spc_t", "user": "u", "role": "r"},
            "sysctls": [
                {"name": "net.core.somaxconn", "value": "1"},
                {"name": "net.core.rmem_max", "value": "1"},
            ],
        },
        "initContainers": [_container("init", securityContext={"privileged": True})],
        "containers": [
            _container(
                securityContext={
                    "appArmorProfile": {"type": "Unconfined"},
                    "seccompProfile": {"type": "Unconfined"},
                    "seLinuxOptions": {"user": "u"},
                },
                ports=[
                    {"containerPort": 80, "hostPort": 80},
                    {"containerPort": 81, "hostPort": 81},
                ],
            ),
            _container(
                "side",
                securityContext={"capabilities": {"add": ["SYS_ADMIN", "NET_ADMIN", "CHOWN"]}},
                ports=[{"containerPort": 82, "hostPort": 82}],
            ),
        ],
        "volumes": [
            {"name": "h1", "hostPath": {"path": "/"}},
            {"name": "h2", "hostPath": {"path": "/x"}},
        ],
    },
    "per-container": {
        "hostUsers": False,
        "securityContext": {"appArmorProfile": {"type": "Unconfined"}},
        "initContainers": [
            _container("init", securityContext={"capabilities": {"add": ["NET_ADMIN"]}})
        ],
        "containers": [
            _container(
                securityContext={
                    "appArmorProfile": {"type": "Unconfined"},
                    "seccompProfile": {"type": "Unconfined"},
                    "seLinuxOptions": {"type": "spc_t"},
                    "procMount": "Unmasked",
                    "capabilities": {"add": ["SYS_ADMIN"]},
                }
            ),
            _container(
                "b",
                securityContext={
                    "seccompProfile": {"type": "Unconfined"},
                    "seLinuxOptions": {"type": "other_t", "role": "r"},
                    "procMount": "Unmasked",
                    "privileged": True,
                },
            ),
        ],
    },
    "pod-level": {
        "securityContext": {
            "seLinuxOptions": {"user": "u"},
            "seccompProfile": {"type": "Unconfined"},
            "sysctls": [{"name": "net.core.somaxconn", "value": "1"}],
        },
        "containers": [_container(ports=[{"containerPort": 80, "hostPort": 80}])],
    },
}


@pytest.mark.parametrize("name", sorted(BAD_PODS))
def test_kubesim_refuses_what_the_api_server_refuses_in_its_words(kube, name, settings):
    labels = {
        "pod-security.kubernetes.io/enforce": "baseline",
        "pod-security.kubernetes.io/enforce-version": settings.POD_SECURITY_VERSION,
    }
    namespace = {"metadata": {"name": unique_name("psa"), "labels": labels}}
    core = client.CoreV1Api(kube)
    core.create_namespace(namespace)
    try:
        ns = namespace["metadata"]["name"]
        wait_for(lambda: core.list_namespaced_service_account(ns).items, timeout=30)
        with pytest.raises(ApiException) as refused:
            _create_pod(kube, ns, name, BAD_PODS[name])
        assert refused.value.status == 403
        real = json.loads(refused.value.body)["message"]
    finally:
        core.delete_namespace(namespace["metadata"]["name"])
    store = Store()
    store.create(NAMESPACES, namespace)
    pod = {"metadata": {"name": name, "namespace": ns}, "spec": BAD_PODS[name]}
    with pytest.raises(Forbidden) as sim_refused:
        store.create(PODS, pod)
    assert sim_refused.value.message == real
