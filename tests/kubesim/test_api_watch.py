"""Watches through kubernetes.watch.Watch: events from a resourceVersion, bookmarks, 410."""

import json
import threading
import time
import urllib.request

import pytest
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from kubesim.testing import running_kubesim


def _cm(name, **data):
    return {"metadata": {"name": name, "labels": {"app": "demo"}}, "data": data}


def test_watch_from_resource_version_sees_added_modified_deleted(k8s, namespace):
    v1 = client.CoreV1Api(k8s)
    start = v1.list_namespaced_config_map(namespace).metadata.resource_version
    v1.create_namespaced_config_map(namespace, _cm("a", x="1"))
    v1.patch_namespaced_config_map("a", namespace, {"data": {"x": "2"}})
    v1.delete_namespaced_config_map("a", namespace)

    events = []
    w = watch.Watch()
    for event in w.stream(
        v1.list_namespaced_config_map, namespace, resource_version=start, timeout_seconds=5
    ):
        events.append((event["type"], event["object"].metadata.name, event["object"].data))
        if len(events) == 3:
            w.stop()
    assert events == [
        ("ADDED", "a", {"x": "1"}),
        ("MODIFIED", "a", {"x": "2"}),
        ("DELETED", "a", {"x": "2"}),
    ]


def test_watch_streams_live_events(k8s, namespace):
    v1 = client.CoreV1Api(k8s)
    start = v1.list_namespaced_config_map(namespace).metadata.resource_version

    def later():
        time.sleep(0.2)
        v1.create_namespaced_config_map(namespace, _cm("live"))

    thread = threading.Thread(target=later)
    thread.start()
    w = watch.Watch()
    seen = None
    for event in w.stream(
        v1.list_namespaced_config_map, namespace, resource_version=start, timeout_seconds=5
    ):
        seen = (event["type"], event["object"].metadata.name)
        w.stop()
    thread.join()
    assert seen == ("ADDED", "live")


def test_watch_without_resource_version_lists_existing_objects_first(k8s, namespace):
    v1 = client.CoreV1Api(k8s)
    v1.create_namespaced_config_map(namespace, _cm("one"))
    v1.create_namespaced_config_map(namespace, _cm("two"))
    names = []
    w = watch.Watch()
    for event in w.stream(v1.list_namespaced_config_map, namespace, timeout_seconds=5):
        assert event["type"] == "ADDED"
        names.append(event["object"].metadata.name)
        if len(names) == 2:
            w.stop()
    assert sorted(names) == ["one", "two"]


def test_watch_label_selector_filters_and_reports_objects_leaving_it(k8s, namespace):
    v1 = client.CoreV1Api(k8s)
    start = v1.list_namespaced_config_map(namespace).metadata.resource_version
    v1.create_namespaced_config_map(namespace, {"metadata": {"name": "other"}})
    v1.create_namespaced_config_map(namespace, _cm("mine"))
    v1.patch_namespaced_config_map("mine", namespace, {"metadata": {"labels": {"app": None}}})
    events = []
    w = watch.Watch()
    for event in w.stream(
        v1.list_namespaced_config_map,
        namespace,
        resource_version=start,
        label_selector="app=demo",
        timeout_seconds=2,
    ):
        events.append((event["type"], event["object"].metadata.name))
        if len(events) == 2:
            w.stop()
    assert events == [("ADDED", "mine"), ("DELETED", "mine")]


def test_watch_custom_objects_across_versions(k8s):
    co = client.CustomObjectsApi(k8s)
    start = co.list_cluster_custom_object("kueue.x-k8s.io", "v1beta1", "clusterqueues")
    body = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "cq"},
        "spec": {"cohortName": "research"},
    }
    co.create_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "clusterqueues", body)
    w = watch.Watch()
    for event in w.stream(
        co.list_cluster_custom_object,
        "kueue.x-k8s.io",
        "v1beta1",
        "clusterqueues",
        resource_version=start["metadata"]["resourceVersion"],
        timeout_seconds=5,
    ):
        obj = event["object"]
        w.stop()
    assert obj["apiVersion"] == "kueue.x-k8s.io/v1beta1"
    assert obj["spec"]["cohort"] == "research"


def test_too_old_resource_version_is_410():
    with running_kubesim(controllers=False, watch_history=5) as ks:
        api = config.new_client_from_config(ks.kubeconfig)
        v1 = client.CoreV1Api(api)
        start = v1.list_namespaced_config_map("default").metadata.resource_version
        for n in range(8):
            v1.create_namespaced_config_map("default", _cm(f"c{n}"))
        with pytest.raises(ApiException) as exc:
            for _ in watch.Watch().stream(
                v1.list_namespaced_config_map, "default", resource_version=start, timeout_seconds=2
            ):
                pass
        api.close()
    assert exc.value.status == 410
    assert "Expired: too old resource version" in exc.value.reason


def test_watch_timeout_ends_the_stream_with_a_bookmark(kubesim, k8s, namespace):
    client.CoreV1Api(k8s).create_namespaced_config_map(namespace, _cm("x"))
    url = (
        f"{kubesim.url}/api/v1/namespaces/{namespace}/configmaps"
        "?watch=true&timeoutSeconds=1&allowWatchBookmarks=true&resourceVersion=1"
    )
    start = time.monotonic()
    with urllib.request.urlopen(url) as resp:
        assert resp.headers["Transfer-Encoding"] == "chunked"
        events = [json.loads(line) for line in resp.read().splitlines() if line.strip()]
    assert 1 <= time.monotonic() - start < 3
    assert [e["type"] for e in events] == ["ADDED", "BOOKMARK"]
    assert int(events[-1]["object"]["metadata"]["resourceVersion"]) >= int(
        events[0]["object"]["metadata"]["resourceVersion"]
    )


def test_server_releases_a_watch_the_client_abandons(kubesim, k8s, namespace):
    v1 = client.CoreV1Api(k8s)
    v1.create_namespaced_config_map(namespace, _cm("x"))
    w = watch.Watch()
    for _ in w.stream(v1.list_namespaced_config_map, namespace, timeout_seconds=60):
        assert kubesim.store.watch_count() == 1
        w.stop()
    deadline = time.monotonic() + 5
    while kubesim.store.watch_count() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert kubesim.store.watch_count() == 0


def test_watch_from_a_future_resource_version_is_410(k8s, namespace):
    v1 = client.CoreV1Api(k8s)
    current = int(v1.list_namespaced_config_map(namespace).metadata.resource_version)
    with pytest.raises(ApiException) as exc:
        for _ in watch.Watch().stream(
            v1.list_namespaced_config_map,
            namespace,
            resource_version=str(current + 1000),
            timeout_seconds=2,
        ):
            pass
    assert exc.value.status == 410
