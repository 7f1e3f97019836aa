"""A namespace's guard rails, enforced by the API server's admission: a ResourceQuota refuses a
pod that would take the namespace over it (and a Job's controller then cannot create its pods),
a LimitRange's defaults are written into a pod at its creation and its maximum refuses a pod
above it; and the API server writes quantities in their canonical form (Kubernetes' "Resource
Quotas", "Limit Ranges" and the Quantity serialisation rules)."""

from __future__ import annotations

import json

import pytest
from kubernetes.client.rest import ApiException

from tests.scenarios import objects as o
from tests.scenarios.objects import GPU


def _quota(sc, ns, hard: dict) -> None:
    sc.create({"apiVersion": "v1", "kind": "ResourceQuota",
               "metadata": {"name": "qm-guardrails"}, "spec": {"hard": hard}}, ns)  # fmt: skip


def _l4(name: str, gpus: int, cluster) -> dict:
    return o.pod(name, {GPU: gpus}, node_selector={o.POOL_LABEL: "l4"},
                 annotations=cluster.runs(600))  # fmt: skip


def test_a_pod_over_the_namespaces_quota_is_refused_with_the_api_servers_message(sc, cluster):
    ns = sc.namespace()
    _quota(sc, ns, {"requests.nvidia.com/gpu": "2", "pods": "5"})
    sc.wait(lambda: (sc.get("ResourceQuota", "qm-guardrails", ns).get("status") or {}).get("hard"),
            "the quota's status")  # fmt: skip
    sc.create(_l4("first", 2, cluster), ns)
    with pytest.raises(ApiException) as refused:
        sc.create(_l4("second", 1, cluster), ns)
    assert refused.value.status == 403
    status = json.loads(refused.value.body)
    assert status["reason"] == "Forbidden"
    assert status["message"] == (
        'pods "second" is forbidden: exceeded quota: qm-guardrails, requested: '
        "requests.nvidia.com/gpu=1, used: requests.nvidia.com/gpu=2, "
        "limited: requests.nvidia.com/gpu=2"
    )
    # A pod without GPUs is admitted (pods are within their own limit).
    sc.create(o.pod("cpu-only", annotations=cluster.runs(600)), ns)

    def used():
        status = sc.get("ResourceQuota", "qm-guardrails", ns).get("status") or {}
        return status if (status.get("used") or {}).get("pods") == "2" else None

    status = sc.wait(used, "the quota's usage")
    assert status["used"] == {"requests.nvidia.com/gpu": "2", "pods": "2"}
    assert status["hard"] == {"requests.nvidia.com/gpu": "2", "pods": "5"}


def test_a_jobs_pods_over_the_quota_are_not_created_and_the_job_says_why(sc, cluster):
    ns = sc.namespace()
    _quota(sc, ns, {"requests.nvidia.com/gpu": "1"})
    sc.wait(lambda: (sc.get("ResourceQuota", "qm-guardrails", ns).get("status") or {}).get("hard"),
            "the quota's status")  # fmt: skip
    body = o.job("greedy", None, {GPU: 2}, annotations=cluster.runs(600))
    body["spec"]["template"]["spec"]["nodeSelector"] = {o.POOL_LABEL: "l4"}
    sc.create(body, ns)
    refused = sc.wait(lambda: [e for e in sc.events(ns, "greedy") if e.reason == "FailedCreate"],
                      "the Job's FailedCreate event")  # fmt: skip
    assert "exceeded quota: qm-guardrails" in refused[0].message
    assert refused[0].type == "Warning"
    assert sc.pods(ns, "job-name=greedy") == []


def test_a_limit_ranges_defaults_are_written_into_a_pod_when_it_is_created(sc, cluster):
    ns = sc.namespace()
    sc.create({"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "defaults"},
               "spec": {"limits": [{"type": "Container",
                                    "default": {"cpu": "1", "memory": "2Gi"},
                                    "defaultRequest": {"cpu": "500m", "memory": "1Gi"},
                                    "max": {"cpu": "2"}}]}}, ns)  # fmt: skip
    created = sc.create(o.pod("plain", annotations=cluster.runs(600)), ns)
    resources = created["spec"]["containers"][0]["resources"]
    assert resources == {"limits": {"cpu": "1", "memory": "2Gi"},
                         "requests": {"cpu": "500m", "memory": "1Gi"}}  # fmt: skip
    assert created["metadata"]["annotations"]["kubernetes.io/limit-ranger"] == (
        "LimitRanger plugin set: cpu, memory request for container trainer; "
        "cpu, memory limit for container trainer"
    )
    # A request without a limit gets the default limit; the QoS class follows.
    own = sc.create(o.pod("own", requests={"cpu": "1", "memory": "2Gi"},
                          annotations=cluster.runs(600)), ns)  # fmt: skip
    assert own["spec"]["containers"][0]["resources"]["limits"] == {"cpu": "1", "memory": "2Gi"}
    assert own["status"]["qosClass"] == "Guaranteed"
    with pytest.raises(ApiException) as refused:
        sc.create(o.pod("big", {"cpu": "4"}, annotations=cluster.runs(600)), ns)
    assert refused.value.status == 403
    assert json.loads(refused.value.body)["message"] == (
        'pods "big" is forbidden: maximum cpu usage per Container is 2, but limit is 4'
    )


def test_quantities_are_written_in_their_canonical_form(sc, cluster):
    ns = sc.namespace()
    _quota(sc, ns, {"requests.memory": "1024Gi", "requests.cpu": "2000m", "pods": "10"})
    hard = sc.get("ResourceQuota", "qm-guardrails", ns)["spec"]["hard"]
    assert hard == {"requests.memory": "1Ti", "requests.cpu": "2", "pods": "10"}
    created = sc.create(o.pod("sized", {"cpu": "500m", "memory": "1024Mi", GPU: 1},
                              node_selector={o.POOL_LABEL: "l4"},
                              annotations=cluster.runs(600)), ns)  # fmt: skip
    limits = created["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"cpu": "500m", "memory": "1Gi", GPU: "1"}
    # Requests default to the limits (extended resources must have requests equal to them).
    assert created["spec"]["containers"][0]["resources"]["requests"] == limits
