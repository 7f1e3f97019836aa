"""CRUD, selectors, pagination, conflicts and errors through the official client."""

import json
import threading

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from kubernetes.dynamic import DynamicClient

KUEUE = ("kueue.x-k8s.io", "v1beta2")


def _pod(name, labels=None):
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }


def _status(exc: ApiException) -> dict:
    return json.loads(exc.body)


def test_namespaced_crud_round_trip(k8s, namespace):
    v1 = client.CoreV1Api(k8s)
    created = v1.create_namespaced_config_map(
        namespace, {"metadata": {"name": "cfg"}, "data": {"a": "1"}}
    )
    assert created.metadata.uid
    assert created.metadata.resource_version
    assert created.metadata.creation_timestamp is not None

    got = v1.read_namespaced_config_map("cfg", namespace)
    assert got.data == {"a": "1"}

    got.data["b"] = "2"
    updated = v1.replace_namespaced_config_map("cfg", namespace, got)
    assert int(updated.metadata.resource_version) > int(created.metadata.resource_version)

    patched = v1.patch_namespaced_config_map("cfg", namespace, {"data": {"a": None, "c": "3"}})
    assert patched.data == {"b": "2", "c": "3"}

    v1.delete_namespaced_config_map("cfg", namespace)
    with pytest.raises(ApiException) as exc:
        v1.read_namespaced_config_map("cfg", namespace)
    assert exc.value.status == 404
    body = _status(exc.value)
    assert body["kind"] == "Status"
    assert body["reason"] == "NotFound"
    assert body["details"] == {"name": "cfg", "group": "", "kind": "configmaps"}


def test_create_twice_is_already_exists(k8s, namespace):
    batch = client.BatchV1Api(k8s)
    job = {
        "metadata": {"name": "train"},
        "spec": {
            "suspend": True,
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}
            },
        },
    }
    batch.create_namespaced_job(namespace, job)
    with pytest.raises(ApiException) as exc:
        batch.create_namespaced_job(namespace, job)
    assert exc.value.status == 409
    assert _status(exc.value)["reason"] == "AlreadyExists"
    assert _status(exc.value)["message"] == 'jobs.batch "train" already exists'


def test_create_in_missing_namespace_is_not_found(k8s):
    with pytest.raises(ApiException) as exc:
        client.CoreV1Api(k8s).create_namespaced_pod("nowhere", _pod("p"))
    assert exc.value.status == 404
    assert 'namespaces "nowhere" not found' in _status(exc.value)["message"]


def test_generate_name(k8s, namespace):
    pod = client.CoreV1Api(k8s).create_namespaced_pod(
        namespace, {"metadata": {"generateName": "worker-"}, "spec": _pod("x")["spec"]}
    )
    assert pod.metadata.name.startswith("worker-")
    assert len(pod.metadata.name) == len("worker-") + 5


def test_stale_update_is_conflict(k8s, namespace):
    v1 = client.CoreV1Api(k8s)
    v1.create_namespaced_config_map(namespace, {"metadata": {"name": "cfg"}, "data": {"a": "1"}})
    first = v1.read_namespaced_config_map("cfg", namespace)
    second = v1.read_namespaced_config_map("cfg", namespace)
    first.data["a"] = "first"
    v1.replace_namespaced_config_map("cfg", namespace, first)
    second.data["a"] = "second"
    with pytest.raises(ApiException) as exc:
        v1.replace_namespaced_config_map("cfg", namespace, second)
    assert exc.value.status == 409
    body = _status(exc.value)
    assert body["reason"] == "Conflict"
    assert "the object has been modified" in body["message"]
    assert v1.read_namespaced_config_map("cfg", namespace).data["a"] == "first"


def test_label_selectors(k8s, namespace):
    v1 = client.CoreV1Api(k8s)
    v1.create_namespaced_pod(namespace, _pod("a", {"team": "vision", "tier": "gold"}))
    v1.create_namespaced_pod(namespace, _pod("b", {"team": "vision", "tier": "bronze"}))
    v1.create_namespaced_pod(namespace, _pod("c", {"team": "nlp"}))

    def names(selector):
        pods = v1.list_namespaced_pod(namespace, label_selector=selector).items
        return sorted(p.metadata.name for p in pods)

    assert names("team=vision") == ["a", "b"]
    assert names("team==vision,tier!=gold") == ["b"]
    assert names("tier in (gold, bronze)") == ["a", "b"]
    assert names("team notin (vision)") == ["c"]
    assert names("tier") == ["a", "b"]
    assert names("!tier") == ["c"]


def test_field_selectors(k8s, namespace):
    v1 = client.CoreV1Api(k8s)
    v1.create_namespaced_pod(namespace, _pod("a"))
    v1.create_namespaced_pod(namespace, _pod("b"))
    pods = v1.list_pod_for_all_namespaces(field_selector=f"metadata.namespace={namespace}")
    assert sorted(p.metadata.name for p in pods.items) == ["a", "b"]
    pods = v1.list_namespaced_pod(namespace, field_selector="metadata.name!=a")
    assert [p.metadata.name for p in pods.items] == ["b"]


def test_limit_and_continue(k8s, namespace):
    v1 = client.CoreV1Api(k8s)
    for n in range(7):
        v1.create_namespaced_config_map(namespace, {"metadata": {"name": f"cm-{n}"}})
    seen, token, pages = [], None, 0
    while True:
        page = v1.list_namespaced_config_map(namespace, limit=3, _continue=token)
        pages += 1
        seen += [c.metadata.name for c in page.items]
        assert page.metadata.resource_version
        token = page.metadata._continue
        if not token:
            break
        assert page.metadata.remaining_item_count == 7 - len(seen)
    assert pages == 3
    assert seen == [f"cm-{n}" for n in range(7)]


def test_cluster_scoped_custom_objects(k8s):
    co = client.CustomObjectsApi(k8s)
    flavor = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": "a100"},
        "spec": {"nodeLabels": {"accelerator": "nvidia-a100-80gb"}},
    }
    co.create_cluster_custom_object(*KUEUE, "resourceflavors", flavor)
    got = co.get_cluster_custom_object(*KUEUE, "resourceflavors", "a100")
    assert got["spec"]["nodeLabels"] == {"accelerator": "nvidia-a100-80gb"}
    items = co.list_cluster_custom_object(*KUEUE, "resourceflavors")["items"]
    assert [i["metadata"]["name"] for i in items] == ["a100"]
    co.delete_cluster_custom_object(*KUEUE, "resourceflavors", "a100")
    assert co.list_cluster_custom_object(*KUEUE, "resourceflavors")["items"] == []


def test_kueue_v1beta1_and_v1beta2_are_one_object(bare_k8s):
    co = client.CustomObjectsApi(bare_k8s)
    cq = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": "vision"},
        "spec": {"cohort": "research", "namespaceSelector": {}},
    }
    co.create_cluster_custom_object("kueue.x-k8s.io", "v1beta1", "clusterqueues", cq)
    v2 = co.get_cluster_custom_object(*KUEUE, "clusterqueues", "vision")
    assert v2["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    assert v2["spec"]["cohortName"] == "research"
    assert "cohort" not in v2["spec"]
    v1 = co.get_cluster_custom_object("kueue.x-k8s.io", "v1beta1", "clusterqueues", "vision")
    assert v1["spec"]["cohort"] == "research"
    assert v1["metadata"]["resourceVersion"] == v2["metadata"]["resourceVersion"]


def test_priority_classes(k8s):
    sched = client.SchedulingV1Api(k8s)
    sched.create_priority_class({"metadata": {"name": "gold"}, "value": 1000})
    assert sched.read_priority_class("gold").value == 1000


def test_dynamic_client_discovery_and_crud(k8s, tmp_path):
    dyn = DynamicClient(k8s, cache_file=str(tmp_path / "discovery.json"))
    cqs = dyn.resources.get(api_version="kueue.x-k8s.io/v1beta2", kind="ClusterQueue")
    assert cqs.namespaced is False
    assert "cq" in cqs.short_names
    cqs.create(
        body={
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": "dyn"},
            "spec": {"namespaceSelector": {}},
        }
    )
    assert [i.metadata.name for i in cqs.get().items] == ["dyn"]
    vcjobs = dyn.resources.get(api_version="batch.volcano.sh/v1alpha1", kind="Job")
    assert vcjobs.namespaced is True
    pods = dyn.resources.get(api_version="v1", kind="Pod")
    assert pods.subresources["status"]


def test_unknown_resource_and_method(raw):
    status, _, body = raw("GET", "/apis/kueue.x-k8s.io/v1beta2/nonsense")
    assert status == 404
    assert body["kind"] == "Status"
    status, _, body = raw("PUT", "/api/v1/namespaces/default/pods", body={})
    assert status == 405
    assert body["reason"] == "MethodNotAllowed"


def test_bad_body_is_bad_request(kubesim):
    import urllib.error
    import urllib.request

    req = urllib.request.Request(
        f"{kubesim.url}/api/v1/namespaces",
        data=b"{not json",
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(req)
    assert exc.value.code == 400
    assert json.loads(exc.value.read())["reason"] == "BadRequest"


def test_custom_resources_refuse_unconditional_updates(bare_k8s):
    co = client.CustomObjectsApi(bare_k8s)
    body = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Cohort",
        "metadata": {"name": "research"},
        "spec": {},
    }
    co.create_cluster_custom_object(*KUEUE, "cohorts", body)
    with pytest.raises(ApiException) as exc:
        co.replace_cluster_custom_object(*KUEUE, "cohorts", "research", body)
    assert exc.value.status == 422
    assert _status(exc.value)["details"]["causes"][0]["field"] == "metadata.resourceVersion"
    current = co.get_cluster_custom_object(*KUEUE, "cohorts", "research")
    current["spec"]["parentName"] = "company"
    replaced = co.replace_cluster_custom_object(*KUEUE, "cohorts", "research", current)
    assert replaced["spec"]["parentName"] == "company"


def test_delete_collection_with_label_selector(k8s, namespace):
    v1 = client.CoreV1Api(k8s)
    for name, team in (("a", "vision"), ("b", "vision"), ("c", "nlp")):
        v1.create_namespaced_config_map(
            namespace, {"metadata": {"name": name, "labels": {"team": team}}}
        )
    v1.delete_collection_namespaced_config_map(namespace, label_selector="team=vision")
    assert [c.metadata.name for c in v1.list_namespaced_config_map(namespace).items] == ["c"]


def test_invalid_label_selector_is_bad_request(k8s, namespace):
    with pytest.raises(ApiException) as exc:
        client.CoreV1Api(k8s).list_namespaced_pod(namespace, label_selector="a in b")
    assert exc.value.status == 400


def test_concurrent_patches_lose_no_update(bare_k8s):
    v1 = client.CoreV1Api(bare_k8s)
    v1.create_namespaced_config_map("default", {"metadata": {"name": "counter"}, "data": {}})

    def writer(n):
        api = client.ApiClient(bare_k8s.configuration)
        mine = client.CoreV1Api(api)
        for k in range(10):
            mine.patch_namespaced_config_map("counter", "default", {"data": {f"w{n}-{k}": "1"}})
        api.close()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(v1.read_namespaced_config_map("counter", "default").data) == 60


def test_injected_faults_answer_errors_then_recover(kubesim, k8s, namespace):
    v1 = client.CoreV1Api(k8s)
    kubesim.inject_faults(1, code=429, retry_after=1, message="slow down")
    with pytest.raises(ApiException) as exc:
        v1.create_namespaced_config_map(namespace, {"metadata": {"name": "c"}})
    assert exc.value.status == 429
    assert exc.value.headers["Retry-After"] == "1"
    assert _status(exc.value)["reason"] == "TooManyRequests"
    v1.read_namespace(namespace)  # reads are not affected
    v1.create_namespaced_config_map(namespace, {"metadata": {"name": "c"}})


def test_a_frozen_server_holds_requests_unanswered_until_thawed(kubesim, k8s, namespace):
    """A cluster that hangs: the connection is accepted and no answer comes; thawed, the held
    request is served and so is the next one."""
    import threading
    import time

    import urllib3

    v1 = client.CoreV1Api(k8s)
    kubesim.freeze()
    with pytest.raises(urllib3.exceptions.HTTPError, match="Read timed out"):
        v1.read_namespace(namespace, _request_timeout=(2, 0.5))
    answers = []
    held = threading.Thread(target=lambda: answers.append(v1.read_namespace(namespace)))
    held.start()
    deadline = time.monotonic() + 5
    while kubesim.held < 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert kubesim.held >= 1 and not answers
    kubesim.thaw()
    held.join(timeout=5)
    assert answers and answers[0].metadata.name == namespace
    assert v1.read_namespace(namespace, _request_timeout=(2, 2)).metadata.name == namespace
    # Writes only: reads go on.
    kubesim.freeze(("POST",))
    assert v1.read_namespace(namespace, _request_timeout=(2, 2)).metadata.name == namespace
    with pytest.raises(urllib3.exceptions.HTTPError, match="Read timed out"):
        v1.create_namespaced_config_map(
            namespace, {"metadata": {"name": "c"}}, _request_timeout=(2, 0.5)
        )
    kubesim.thaw()
