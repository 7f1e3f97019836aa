"""Custom resources are validated against the CRD schemas: 422s, pruning, defaults, Strict."""

import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

KUEUE = ("kueue.x-k8s.io", "v1beta2")


def _cluster_queue(quota=8, **spec):
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "vision"},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": "a100",
                            "resources": [{"name": "nvidia.com/gpu", "nominalQuota": quota}],
                        }
                    ],
                }
            ],
            **spec,
        },
    }


def _invalid(k8s, body, **kwargs) -> dict:
    with pytest.raises(ApiException) as exc:
        client.CustomObjectsApi(k8s).create_cluster_custom_object(
            *KUEUE, "clusterqueues", body, **kwargs
        )
    body = json.loads(exc.value.body)
    assert body["code"] == exc.value.status
    return body


def test_quota_as_an_object_is_422_naming_the_field(k8s):
    err = _invalid(k8s, _cluster_queue(quota={"gpus": 8}))
    assert err["code"] == 422
    assert err["reason"] == "Invalid"
    assert err["details"]["kind"] == "clusterqueues"
    assert err["details"]["group"] == "kueue.x-k8s.io"
    fields = [c["field"] for c in err["details"]["causes"]]
    assert fields == ["spec.resourceGroups[0].flavors[0].resources[0].nominalQuota"]
    assert 'ClusterQueue.kueue.x-k8s.io "vision" is invalid' in err["message"]


def test_unsupported_enum_value_is_422(k8s):
    err = _invalid(k8s, _cluster_queue(queueingStrategy="Random"))
    assert err["code"] == 422
    cause = err["details"]["causes"][0]
    assert cause["field"] == "spec.queueingStrategy"
    assert cause["reason"] == "FieldValueNotSupported"
    assert '"Random"' in cause["message"]


def test_quantities_accept_int_or_string(k8s):
    co = client.CustomObjectsApi(k8s)
    created = co.create_cluster_custom_object(*KUEUE, "clusterqueues", _cluster_queue("16"))
    assert created["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] == (
        "16"
    )


def test_cel_rules_borrowing_limit_needs_a_cohort_and_resource_counts(k8s):
    body = _cluster_queue()
    body["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["borrowingLimit"] = 4
    err = _invalid(k8s, body)
    assert err["code"] == 422
    assert err["details"]["causes"][0]["field"] == "spec"
    assert "borrowingLimit must be nil when cohort is empty" in err["message"]

    body = _cluster_queue()
    body["spec"]["resourceGroups"][0]["coveredResources"].append("cpu")
    err = _invalid(k8s, body)
    assert err["details"]["causes"][0]["field"] == "spec.resourceGroups[0]"
    assert "same number of resources as the coveredResources" in err["message"]


def test_unknown_fields_are_pruned_with_a_warning(raw):
    body = _cluster_queue(foo="bar")
    status, headers, created = raw("POST", "/apis/kueue.x-k8s.io/v1beta2/clusterqueues", body)
    assert status == 201
    assert "foo" not in created["spec"]
    assert headers["Warning"] == '299 - "unknown field \\"spec.foo\\""'
    body["metadata"]["name"] = "quiet"
    path = "/apis/kueue.x-k8s.io/v1beta2/clusterqueues?fieldValidation=Ignore"
    status, headers, created = raw("POST", path, body)
    assert status == 201
    assert "foo" not in created["spec"]
    assert "Warning" not in headers


def test_unknown_fields_are_refused_with_strict_field_validation(k8s):
    err = _invalid(k8s, _cluster_queue(foo="bar"), field_validation="Strict")
    assert err["code"] == 400
    assert err["reason"] == "BadRequest"
    assert 'unknown field "spec.foo"' in err["message"]
    assert (
        client.CustomObjectsApi(k8s).list_cluster_custom_object(*KUEUE, "clusterqueues")["items"]
        == []
    )


def test_schema_defaults_are_applied(k8s):
    co = client.CustomObjectsApi(k8s)
    cq = co.create_cluster_custom_object(*KUEUE, "clusterqueues", _cluster_queue())
    assert cq["spec"]["queueingStrategy"] == "BestEffortFIFO"
    assert cq["spec"]["preemption"]["withinClusterQueue"] == "Never"
    queue = co.create_cluster_custom_object(
        "scheduling.volcano.sh",
        "v1beta1",
        "queues",
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "Queue",
            "metadata": {"name": "research"},
            "spec": {},
        },
    )
    assert queue["spec"]["weight"] == 1


def test_immutable_local_queue_cluster_queue(k8s, namespace):
    co = client.CustomObjectsApi(k8s)
    lq = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": "default"},
        "spec": {"clusterQueue": "vision"},
    }
    co.create_namespaced_custom_object(*KUEUE, namespace, "localqueues", lq)
    with pytest.raises(ApiException) as exc:
        co.patch_namespaced_custom_object(
            *KUEUE, namespace, "localqueues", "default", {"spec": {"clusterQueue": "nlp"}}
        )
    assert exc.value.status == 422
    assert "field is immutable" in json.loads(exc.value.body)["message"]


def test_patch_that_breaks_the_schema_is_refused_and_stores_nothing(k8s):
    co = client.CustomObjectsApi(k8s)
    co.create_cluster_custom_object(*KUEUE, "clusterqueues", _cluster_queue())
    with pytest.raises(ApiException) as exc:
        co.patch_cluster_custom_object(
            *KUEUE, "clusterqueues", "vision", {"spec": {"stopPolicy": "Pause"}}
        )
    assert exc.value.status == 422
    assert (
        co.get_cluster_custom_object(*KUEUE, "clusterqueues", "vision")["spec"]["stopPolicy"]
        == "None"
    )


def test_properties_named_like_schema_keywords_are_validated(k8s):
    co = client.CustomObjectsApi(k8s)
    wpc = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "WorkloadPriorityClass",
        "metadata": {"name": "gold"},
        "value": 1000,
        "description": 42,
    }
    with pytest.raises(ApiException) as exc:
        co.create_cluster_custom_object(*KUEUE, "workloadpriorityclasses", wpc)
    assert exc.value.status == 422
    assert json.loads(exc.value.body)["details"]["causes"][0]["field"] == "description"
    wpc["description"] = "the gold tier"
    created = co.create_cluster_custom_object(*KUEUE, "workloadpriorityclasses", wpc)
    assert created["value"] == 1000
