"""Routes served from the controllers: the DCGM exporter and Kueue's visibility API."""

import urllib.error
import urllib.request

import pytest
from kubernetes import client

VISIBILITY = "/apis/visibility.kueue.x-k8s.io"


def test_dcgm_metrics_routes(kubesim):
    with urllib.request.urlopen(f"{kubesim.url}/metrics/dcgm") as resp:
        assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = resp.read().decode()
    assert "DCGM_FI_DEV_GPU_UTIL" in text
    assert 'Hostname="l4-node-1"' in text
    with urllib.request.urlopen(f"{kubesim.url}/metrics/dcgm/a100-node-0") as resp:
        one = resp.read().decode()
    assert 'Hostname="a100-node-0"' in one
    assert 'Hostname="l4-node-1"' not in one


def test_visibility_api_pending_workloads(k8s, raw, namespace):
    co = client.CustomObjectsApi(k8s)
    co.create_cluster_custom_object(
        "kueue.x-k8s.io",
        "v1beta2",
        "clusterqueues",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": "vision"},
            "spec": {"namespaceSelector": {}},
        },
    )
    co.create_namespaced_custom_object(
        "kueue.x-k8s.io",
        "v1beta2",
        namespace,
        "localqueues",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "default"},
            "spec": {"clusterQueue": "vision"},
        },
    )
    for version in ("v1beta1", "v1beta2"):
        status, _, body = raw(
            "GET", f"{VISIBILITY}/{version}/clusterqueues/vision/pendingworkloads?limit=10"
        )
        assert status == 200
        assert body["kind"] == "PendingWorkloadsSummary"
        assert body["apiVersion"] == f"visibility.kueue.x-k8s.io/{version}"
        assert body["items"] == []
    status, _, body = raw(
        "GET", f"{VISIBILITY}/v1beta2/namespaces/{namespace}/localqueues/default/pendingworkloads"
    )
    assert status == 200
    assert body["kind"] == "PendingWorkloadsSummary"
    status, _, body = raw("GET", f"{VISIBILITY}/v1beta2/clusterqueues/nope/pendingworkloads")
    assert status == 404
    assert body["reason"] == "NotFound"


def test_discovery_lists_served_groups(raw):
    _, _, groups = raw("GET", "/apis")
    names = {g["name"]: g["preferredVersion"]["version"] for g in groups["groups"]}
    assert names["kueue.x-k8s.io"] == "v1beta2"
    assert names["batch.volcano.sh"] == "v1alpha1"
    assert names["visibility.kueue.x-k8s.io"] == "v1beta2"
    _, _, resources = raw("GET", "/apis/kueue.x-k8s.io/v1beta2")
    by_name = {r["name"]: r for r in resources["resources"]}
    assert by_name["localqueues"]["namespaced"] is True
    assert by_name["localqueues"]["shortNames"] == ["queue", "queues", "lq"]
    assert by_name["clusterqueues"]["kind"] == "ClusterQueue"
    assert "clusterqueues/status" in by_name
    assert "resourceflavors/status" not in by_name
    _, _, core = raw("GET", "/api/v1")
    assert {"pods", "pods/status", "nodes", "namespaces", "events"} <= {
        r["name"] for r in core["resources"]
    }


def test_health_endpoints(kubesim):
    for path in ("/healthz", "/readyz", "/livez"):
        with urllib.request.urlopen(kubesim.url + path) as resp:
            assert resp.read() == b"ok"
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(kubesim.url + "/nothing-here")
    assert exc.value.code == 404
