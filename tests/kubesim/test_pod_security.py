"""kubesim's Pod Security admission: a namespace that enforces the baseline standard refuses
the pods that break it, as the API server does (403 with every failed check named), including
those a Job's controller creates (a FailedCreate event on the Job); other namespaces admit them."""

import time

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kubesim.podsecurity import baseline_violations

PSA = "pod-security.kubernetes.io"


def _pod(name, **spec):
    container = {"name": "main", "image": "busybox", **spec.pop("container", {})}
    return {"metadata": {"name": name}, "spec": {"containers": [container], **spec}}


@pytest.fixture
def enforced(k8s):
    client.CoreV1Api(k8s).create_namespace(
        {"metadata": {"name": "locked", "labels": {f"{PSA}/enforce": "baseline",
                                                    f"{PSA}/enforce-version": "v1.33"}}}
    )  # fmt: skip
    return "locked"


def test_a_baseline_namespace_refuses_what_breaks_the_baseline(k8s, enforced, namespace):
    v1 = client.CoreV1Api(k8s)
    bad = _pod("bad", hostNetwork=True, container={"securityContext": {
        "privileged": True, "capabilities": {"add": ["SYS_ADMIN", "CHOWN"]}}},
        volumes=[{"name": "root", "hostPath": {"path": "/"}}])  # fmt: skip
    with pytest.raises(ApiException) as refused:
        v1.create_namespaced_pod(enforced, bad)
    assert refused.value.status == 403
    message = refused.value.body
    assert 'violates PodSecurity \\"baseline:v1.33\\"' in message
    for check in ("host namespaces (hostNetwork=true)", "privileged", '\\"SYS_ADMIN\\"',
                  'hostPath volumes (volume \\"root\\")'):  # fmt: skip
        assert check in message
    assert "CHOWN" not in message  # a capability the baseline allows
    fine = _pod("fine", securityContext={"seccompProfile": {"type": "RuntimeDefault"}},
                container={"securityContext": {"allowPrivilegeEscalation": False,
                                               "capabilities": {"drop": ["ALL"]}}})  # fmt: skip
    assert v1.create_namespaced_pod(enforced, fine).metadata.name == "fine"
    # A namespace without the label admits anything.
    assert v1.create_namespaced_pod(namespace, bad).metadata.name == "bad"


def test_a_jobs_pods_refused_by_pod_security_leave_a_failed_create_event(k8s, enforced):
    job = {
        "metadata": {"name": "rooty"},
        "spec": {"template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox",
                            "securityContext": {"privileged": True}}],
        }}},
    }  # fmt: skip
    client.BatchV1Api(k8s).create_namespaced_job(enforced, job)
    v1 = client.CoreV1Api(k8s)
    deadline = time.monotonic() + 10
    events = []
    while time.monotonic() < deadline and not events:
        events = [e for e in v1.list_namespaced_event(enforced).items
                  if e.reason == "FailedCreate" and e.involved_object.name == "rooty"]  # fmt: skip
        time.sleep(0.1)
    assert events and "violates PodSecurity" in events[0].message
    assert v1.list_namespaced_pod(enforced).items == []


@pytest.mark.parametrize(
    "spec,check",
    [
        ({"hostPID": True, "hostIPC": True}, "host namespaces (hostPID=true, hostIPC=true)"),
        ({"containers": [{"name": "m", "ports": [{"containerPort": 80, "hostPort": 8080}]}]},
         'hostPort (container "m" uses hostPort 8080)'),
        ({"securityContext": {"seccompProfile": {"type": "Unconfined"}}},
         'seccompProfile (pod must not set securityContext.seccompProfile.type to "Unconfined")'),
        ({"containers": [{"name": "m", "securityContext": {"procMount": "Unmasked"}}]},
         'procMount (container "m" must not set securityContext.procMount to "Unmasked")'),
        ({"securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}},
         "forbidden sysctls (kernel.msgmax)"),
        ({"securityContext": {"seLinuxOptions": {"user": "root"}}},
         "seLinuxOptions (pod set forbidden securityContext.seLinuxOptions: user may not be set)"),
    ],
)  # fmt: skip
def test_each_baseline_check(spec, check):
    found = baseline_violations(spec)
    assert len(found) == 1 and found[0].startswith(check), found
    assert baseline_violations({"containers": [{"name": "m"}]}) == []
