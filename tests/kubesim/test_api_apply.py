"""Server-side apply and the other patch types through the official client."""

import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from kubernetes.dynamic import DynamicClient

KUEUE = ("kueue.x-k8s.io", "v1beta2")
APPLY = "application/apply-patch+yaml"


def _cluster_queue(**spec):
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "vision", "labels": {"app.kubernetes.io/managed-by": "quartermaster"}},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": "a100",
                            "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 8}],
                        }
                    ],
                }
            ],
            **spec,
        },
    }


def _apply(co, body, manager="quartermaster", **kwargs):
    name = body["metadata"]["name"]
    result = co.patch_cluster_custom_object(
        *KUEUE, "clusterqueues", name, body, field_manager=manager, _content_type=APPLY, **kwargs
    )
    # An apply that creates answers 201, which CustomObjectsApi (v37) maps to None.
    return result or co.get_cluster_custom_object(*KUEUE, "clusterqueues", name)


def test_apply_creates_then_is_idempotent(bare_k8s):
    # Without controllers: a Kueue controller writing the status would bump resourceVersion.
    co = client.CustomObjectsApi(bare_k8s)
    first = _apply(co, _cluster_queue(queueingStrategy="StrictFIFO"))
    assert first["spec"]["queueingStrategy"] == "StrictFIFO"
    managers = {(m["manager"], m["operation"]) for m in first["metadata"]["managedFields"]}
    assert managers == {("quartermaster", "Apply")}
    fields = first["metadata"]["managedFields"][0]["fieldsV1"]
    assert "f:queueingStrategy" in fields["f:spec"]
    assert "f:app.kubernetes.io/managed-by" in fields["f:metadata"]["f:labels"]

    second = _apply(co, _cluster_queue(queueingStrategy="StrictFIFO"))
    assert second["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    assert second["metadata"]["generation"] == first["metadata"]["generation"] == 1
    assert second["metadata"]["managedFields"] == first["metadata"]["managedFields"]


def test_apply_change_bumps_generation(k8s):
    co = client.CustomObjectsApi(k8s)
    first = _apply(co, _cluster_queue(queueingStrategy="StrictFIFO"))
    second = _apply(co, _cluster_queue(queueingStrategy="BestEffortFIFO"))
    assert int(second["metadata"]["resourceVersion"]) > int(first["metadata"]["resourceVersion"])
    assert second["metadata"]["generation"] == 2


def test_conflict_between_field_managers_and_force(k8s):
    co = client.CustomObjectsApi(k8s)
    _apply(co, _cluster_queue(queueingStrategy="StrictFIFO"), manager="portal")
    with pytest.raises(ApiException) as exc:
        _apply(co, _cluster_queue(queueingStrategy="BestEffortFIFO"), manager="admin")
    assert exc.value.status == 409
    body = json.loads(exc.value.body)
    assert body["reason"] == "Conflict"
    fields = {c["field"] for c in body["details"]["causes"]}
    assert fields == {".spec.queueingStrategy"}
    assert 'conflict with "portal"' in body["message"]

    # The same value is shared ownership, not a conflict.
    _apply(co, _cluster_queue(queueingStrategy="StrictFIFO"), manager="admin")

    forced = _apply(
        co, _cluster_queue(queueingStrategy="BestEffortFIFO"), manager="admin", force=True
    )
    assert forced["spec"]["queueingStrategy"] == "BestEffortFIFO"
    owners = {m["manager"]: m["fieldsV1"] for m in forced["metadata"]["managedFields"]}
    assert "f:queueingStrategy" in owners["admin"]["f:spec"]
    assert "f:queueingStrategy" not in owners["portal"].get("f:spec", {})


def test_removing_a_field_from_the_applied_config_removes_it(k8s):
    co = client.CustomObjectsApi(k8s)
    body = _cluster_queue(stopPolicy="Hold")
    _apply(co, body)
    body["spec"].pop("stopPolicy")
    body["metadata"]["labels"] = {}
    result = _apply(co, body)
    assert result["spec"]["stopPolicy"] == "None"  # back to the schema default
    assert "app.kubernetes.io/managed-by" not in (result["metadata"].get("labels") or {})


def test_an_empty_map_given_fields_keeps_them(k8s):
    # A Cohort applied with `spec: {}`, then with fields in it: the manager owned `spec` as a
    # leaf and now owns fields inside; nothing is removed.
    co = client.CustomObjectsApi(k8s)
    body = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Cohort",
            "metadata": {"name": "dept"}, "spec": {}}  # fmt: skip

    def apply(spec):
        co.patch_cluster_custom_object(*KUEUE, "cohorts", "dept", {**body, "spec": spec},
                                       field_manager="portal", _content_type=APPLY)  # fmt: skip
        return co.get_cluster_custom_object(*KUEUE, "cohorts", "dept")

    assert apply({}).get("spec") in (None, {})
    assert apply({"parentName": "org"})["spec"] == {"parentName": "org"}
    assert apply({"parentName": "org", "fairSharing": {"weight": "2"}})["spec"] == {
        "parentName": "org", "fairSharing": {"weight": "2"},
    }  # fmt: skip
    spec = apply({"parentName": "org"})["spec"]  # the weight removed: the schema's default
    assert spec["parentName"] == "org" and spec.get("fairSharing", {"weight": 1}) == {"weight": 1}


def test_field_owned_by_another_manager_survives_removal(k8s):
    co = client.CustomObjectsApi(k8s)
    _apply(co, _cluster_queue(stopPolicy="Hold"), manager="portal")
    _apply(co, _cluster_queue(stopPolicy="Hold"), manager="admin")
    result = _apply(co, _cluster_queue(), manager="portal")
    assert result["spec"]["stopPolicy"] == "Hold"


def test_keyed_lists_merge_between_managers(k8s, namespace):
    v1 = client.CoreV1Api(k8s)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": namespace},
        "spec": {
            "containers": [
                {"name": "main", "image": "busybox", "env": [{"name": "A", "value": "1"}]}
            ]
        },
    }
    v1.patch_namespaced_pod("p", namespace, pod, field_manager="one", _content_type=APPLY)
    sidecar = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": namespace},
        "spec": {"containers": [{"name": "sidecar", "image": "envoy"}]},
    }
    result = v1.patch_namespaced_pod(
        "p", namespace, sidecar, field_manager="two", _content_type=APPLY
    )
    assert [c.name for c in result.spec.containers] == ["main", "sidecar"]


def test_update_is_recorded_as_update_operation(k8s):
    co = client.CustomObjectsApi(k8s)
    _apply(co, _cluster_queue(queueingStrategy="StrictFIFO"), manager="portal")
    patched = co.patch_cluster_custom_object(
        *KUEUE, "clusterqueues", "vision", {"spec": {"stopPolicy": "Hold"}}, field_manager="ops"
    )
    entries = {(m["manager"], m["operation"]) for m in patched["metadata"]["managedFields"]}
    assert entries == {("portal", "Apply"), ("ops", "Update")}
    ops = next(m for m in patched["metadata"]["managedFields"] if m["manager"] == "ops")
    assert ops["fieldsV1"] == {"f:spec": {"f:stopPolicy": {}}}


def test_dynamic_client_server_side_apply(bare_k8s, tmp_path):
    dyn = DynamicClient(bare_k8s, cache_file=str(tmp_path / "discovery.json"))
    cqs = dyn.resources.get(api_version="kueue.x-k8s.io/v1beta2", kind="ClusterQueue")
    first = cqs.server_side_apply(body=_cluster_queue(), field_manager="portal")
    second = cqs.server_side_apply(body=_cluster_queue(), field_manager="portal")
    assert first.metadata.resourceVersion == second.metadata.resourceVersion


def test_apply_that_creates_answers_201(raw):
    path = "/apis/kueue.x-k8s.io/v1beta2/clusterqueues/vision?fieldManager=portal"
    status, _, body = raw("PATCH", path, body=_cluster_queue(), content_type=APPLY)
    assert status == 201
    assert body["metadata"]["name"] == "vision"
    status, _, _ = raw("PATCH", path, body=_cluster_queue(), content_type=APPLY)
    assert status == 200


def test_apply_requires_field_manager(raw):
    status, _, body = raw(
        "PATCH",
        "/apis/kueue.x-k8s.io/v1beta2/clusterqueues/vision",
        body=_cluster_queue(),
        content_type=APPLY,
    )
    assert status == 400
    assert "fieldManager is required" in body["message"]


def test_json_patch(k8s, namespace):
    v1 = client.CoreV1Api(k8s)
    v1.create_namespaced_config_map(namespace, {"metadata": {"name": "c"}, "data": {"a": "1"}})
    result = v1.patch_namespaced_config_map(
        "c",
        namespace,
        [{"op": "add", "path": "/data/b", "value": "2"}, {"op": "remove", "path": "/data/a"}],
    )
    assert result.data == {"b": "2"}


def test_unsupported_patch_content_type_is_415(raw, namespace):
    status, _, body = raw(
        "PATCH",
        f"/api/v1/namespaces/{namespace}",
        body="<metadata/>",
        content_type="application/xml",
    )
    assert status == 415
    assert body["reason"] == "UnsupportedMediaType"
    assert body["kind"] == "Status"


def test_dry_run_create_and_patch_store_nothing(k8s):
    co = client.CustomObjectsApi(k8s)
    created = co.create_cluster_custom_object(
        *KUEUE, "clusterqueues", _cluster_queue(), dry_run="All"
    )
    assert created["spec"]["queueingStrategy"] == "BestEffortFIFO"
    assert co.list_cluster_custom_object(*KUEUE, "clusterqueues")["items"] == []
    co.create_cluster_custom_object(*KUEUE, "clusterqueues", _cluster_queue())
    co.patch_cluster_custom_object(
        *KUEUE, "clusterqueues", "vision", {"spec": {"stopPolicy": "Hold"}}, dry_run="All"
    )
    got = co.get_cluster_custom_object(*KUEUE, "clusterqueues", "vision")
    assert got["spec"]["stopPolicy"] == "None"


def test_controller_writes_take_field_ownership(kubesim, k8s):
    co = client.CustomObjectsApi(k8s)
    _apply(co, _cluster_queue(stopPolicy="Hold"), manager="portal")
    # A controller (in-process) changes a field the portal applied...
    from kubesim import resources

    cq = kubesim.store.get(resources.CLUSTER_QUEUES, None, "vision")
    cq["spec"]["stopPolicy"] = "None"
    kubesim.store.update(resources.CLUSTER_QUEUES, cq, check_rv=False)
    # ...so re-applying the old value conflicts with the controller, as with a real cluster.
    with pytest.raises(ApiException) as exc:
        _apply(co, _cluster_queue(stopPolicy="Hold"), manager="portal")
    assert exc.value.status == 409
    assert 'conflict with "kubesim-controllers"' in json.loads(exc.value.body)["message"]


def test_strategic_merge_patch_merges_containers_by_name(bare_k8s):
    v1 = client.CoreV1Api(bare_k8s)
    v1.create_namespaced_pod(
        "default",
        {
            "metadata": {"name": "p", "finalizers": ["a.example.com/x"]},
            "spec": {
                "containers": [
                    {"name": "main", "image": "busybox", "env": [{"name": "A", "value": "1"}]},
                    {"name": "sidecar", "image": "envoy"},
                ]
            },
        },
    )
    # A dict body to a built-in kind is sent as a strategic merge patch by the client.
    patched = v1.patch_namespaced_pod(
        "p",
        "default",
        {
            "metadata": {"finalizers": ["b.example.com/y"]},
            "spec": {
                "containers": [
                    {"name": "main", "env": [{"name": "B", "value": "2"}]},
                    {"name": "sidecar", "$patch": "delete"},
                ]
            },
        },
    )
    assert [c.name for c in patched.spec.containers] == ["main"]
    assert patched.spec.containers[0].image == "busybox"
    assert [(e.name, e.value) for e in patched.spec.containers[0].env] == [("A", "1"), ("B", "2")]
    assert patched.metadata.finalizers == ["a.example.com/x", "b.example.com/y"]


def test_strategic_merge_patch_is_refused_for_custom_resources(raw):
    status, _, body = raw(
        "PATCH",
        "/apis/kueue.x-k8s.io/v1beta2/clusterqueues/vision",
        body={"spec": {}},
        content_type="application/strategic-merge-patch+json",
    )
    assert status == 415
    assert body["reason"] == "UnsupportedMediaType"
