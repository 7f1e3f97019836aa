"""Renderers: every object validates against the upstream CRD schema, with no unknown fields."""

import re

import pytest

from fleet.quantities import WorkerSize
from queues.manifests import quotas as manifests
from queues.manifests.common import manifest_hash
from queues.manifests.guardrails import GUARDRAIL_KINDS
from queues.models import Quota
from queues.services.reconcile import cluster_desired_state
from tests.crd_validation import assert_valid_manifest, manifest_errors


def _by_kind(state):
    out = {}
    for _owner_type, _owner_id, manifest in state:
        out.setdefault(manifest["kind"], []).append(manifest)
    return out


@pytest.mark.parametrize("version", ["v1beta2", "v1beta1"])
def test_kueue_desired_state_validates_against_crds(quota_world, version):
    quota_world["cluster"].kueue_api_version = version
    quota_world["vision"].queue_hold_reason = "Budget spent"
    quota_world["vision"].save()
    state = cluster_desired_state(cluster=quota_world["cluster"])
    kinds = _by_kind(state)
    assert set(kinds) == {
        "ResourceFlavor",
        "Cohort",
        "Namespace",
        "ClusterQueue",
        "LocalQueue",
        "WorkloadPriorityClass",
        *GUARDRAIL_KINDS,
    }
    for _t, _i, manifest in state:
        assert_valid_manifest(manifest)
        assert manifest["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "quartermaster"
        if manifest["kind"] not in ("Namespace", *GUARDRAIL_KINDS):
            assert manifest["apiVersion"] in (f"kueue.x-k8s.io/{version}", "v1")


def test_cluster_queue_fields(quota_world):
    a100 = quota_world["a100"]
    # a100 workers get 12 CPUs and 96 GiB per GPU; l4 has no size known: the defaults.
    sizes = {a100.pk: WorkerSize(12000, 96 * 1024, 96000, 768 * 1024)}
    cq = manifests.cluster_queue_manifest(
        quota_world["vision"],
        Quota.objects.filter(team=quota_world["vision"]).select_related("pool"),
        sizes=sizes,
    )
    assert (
        cq["metadata"]["name"] == "qm-vision" == manifests.cluster_queue_name(quota_world["vision"])
    )
    spec = cq["spec"]
    assert spec["cohortName"] == "qm-research"
    assert spec["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": quota_world["vision"].namespace}
    }
    group = spec["resourceGroups"][0]
    # CPU and memory are covered too (Kueue leaves a workload requesting an uncovered resource
    # pending), as each granted GPU's share of a node: quota stays a count of GPUs.
    assert group["coveredResources"] == ["cpu", "memory", "nvidia.com/gpu"]
    assert group["flavors"] == [
        {
            "name": "a100",
            "resources": [
                {"name": "cpu", "nominalQuota": "96", "borrowingLimit": "48",
                 "lendingLimit": "24"},
                {"name": "memory", "nominalQuota": "768Gi", "borrowingLimit": "384Gi",
                 "lendingLimit": "192Gi"},
                {"name": "nvidia.com/gpu", "nominalQuota": 8, "borrowingLimit": 4,
                 "lendingLimit": 2},
            ],
        },
        # No borrowing limit means "no limit": the field is left out, not set to 0.
        {"name": "l4", "resources": [
            {"name": "cpu", "nominalQuota": "8"}, {"name": "memory", "nominalQuota": "32Gi"},
            {"name": "nvidia.com/gpu", "nominalQuota": 2}]},
    ]  # fmt: skip
    assert spec["preemption"] == {
        "withinClusterQueue": "LowerPriority",
        "reclaimWithinCohort": "Any",
    }
    assert spec["queueingStrategy"] == "BestEffortFIFO"
    assert spec["stopPolicy"] == "None"
    assert cq["metadata"]["labels"]["quartermaster.dev/team"] == "vision"
    assert cq["metadata"]["labels"]["quartermaster.dev/department"] == "research"


def test_v1beta1_uses_cohort_field(quota_world):
    cq = manifests.cluster_queue_manifest(quota_world["nlp"], [], api_version="v1beta1")
    assert cq["spec"]["cohort"] == "qm-research"
    assert "cohortName" not in cq["spec"]
    # The v1beta1 spelling is an unknown field for v1beta2, and the validator must say so.
    cq["apiVersion"] = "kueue.x-k8s.io/v1beta2"
    assert "unknown field spec.cohort" in manifest_errors(cq)


def test_validator_refuses_unknown_and_misspelled_fields(quota_world):
    cq = manifests.cluster_queue_manifest(
        quota_world["vision"], Quota.objects.filter(team=quota_world["vision"])
    )
    cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][-1]["nominalQuotas"] = 3
    cq["metadata"]["uid"] = "x"
    errors = manifest_errors(cq)
    assert any("nominalQuotas" in e for e in errors)
    assert "unknown field metadata.uid" in errors


def test_held_team_queues_are_held(quota_world):
    quota_world["vision"].queue_hold_reason = "Budget for May spent"
    cq = manifests.cluster_queue_manifest(quota_world["vision"], [])
    lq = manifests.local_queue_manifest(quota_world["vision"])
    assert cq["spec"]["stopPolicy"] == "Hold"
    assert lq["spec"]["stopPolicy"] == "Hold"
    assert cq["metadata"]["annotations"]["quartermaster.dev/hold-reason"] == "Budget for May spent"


def test_local_queue_and_names(quota_world):
    lq = manifests.local_queue_manifest(quota_world["vision"])
    assert lq["metadata"]["namespace"] == quota_world["vision"].namespace
    assert lq["metadata"]["name"] == manifests.local_queue_name(quota_world["vision"]) == "vision"
    assert lq["spec"]["clusterQueue"] == "qm-vision"
    assert manifests.flavor_name(quota_world["a100"]) == "a100"


def test_resource_flavor_tolerates_its_taints(quota_world):
    rf = manifests.resource_flavor_manifest(quota_world["a100"])
    assert rf["spec"]["nodeLabels"] == {"accelerator": "a100"}
    assert rf["spec"]["nodeTaints"] == [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    ]
    assert rf["spec"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}
    ]
    assert_valid_manifest(rf)


def test_tier_renders_value_and_description(quota_world):
    production = quota_world["tiers"]["production"]
    wpc = manifests.workload_priority_class_manifest(production)
    assert wpc["metadata"]["name"] == "production"
    assert wpc["value"] == 1000
    assert "not preempted by lower tiers" in wpc["description"]
    assert "borrowed from other teams can be reclaimed" in wpc["description"]
    assert "spec" not in wpc


def test_volcano_desired_state(quota_world):
    quota_world["cluster"].scheduler = "volcano"
    quota_world["nlp"].queue_hold_reason = "Budget spent"
    quota_world["nlp"].save()
    state = cluster_desired_state(cluster=quota_world["cluster"])
    kinds = _by_kind(state)
    assert set(kinds) == {"Queue", "Namespace", "PriorityClass", *GUARDRAIL_KINDS}
    for _t, _i, manifest in state:
        assert_valid_manifest(manifest)
    queues = {q["metadata"]["name"]: q for q in kinds["Queue"]}
    vision = queues["qm-vision"]["spec"]
    assert vision["parent"] == "qm-research"
    assert vision["deserved"] == {"nvidia.com/gpu": "10"}
    # The l4 quota has no borrowing limit, so the queue's capability is unlimited.
    assert "capability" not in vision
    assert vision["guarantee"] == {"resource": {"nvidia.com/gpu": "6"}}
    assert queues["qm-nlp"]["spec"]["capability"] == {"nvidia.com/gpu": "0"}
    assert queues["qm-research"]["spec"]["deserved"] == {"nvidia.com/gpu": "14"}
    # Each pool's own limits are a leaf Queue under the team's.
    a100 = queues[manifests.volcano_pool_queue_name(quota_world["vision"], quota_world["a100"])]
    assert a100["spec"]["parent"] == "qm-vision"
    assert a100["spec"]["deserved"] == {"nvidia.com/gpu": "8"}
    assert a100["spec"]["capability"] == {"nvidia.com/gpu": "12"}  # 8 + borrowing limit 4
    assert a100["spec"]["guarantee"] == {"resource": {"nvidia.com/gpu": "6"}}  # lends 2
    l4 = queues[manifests.volcano_pool_queue_name(quota_world["vision"], quota_world["l4"])]
    assert l4["spec"]["deserved"] == {"nvidia.com/gpu": "2"} and "capability" not in l4["spec"]
    assert {p["metadata"]["name"] for p in kinds["PriorityClass"]} == {"production", "experiment"}


def test_volcano_pool_queue_names_never_collide():
    from types import SimpleNamespace as N

    pairs = [("a-b", "c"), ("a", "b-c"), ("x" * 63, "y" * 63), ("x" * 63, "y" * 62)]
    names = [manifests.volcano_pool_queue_name(N(slug=t), N(name=p)) for t, p in pairs]
    assert len(set(names)) == len(names)
    assert all(len(n) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", n) for n in names)


def test_desired_state_is_deterministic(quota_world):
    one = cluster_desired_state(cluster=quota_world["cluster"])
    two = cluster_desired_state(cluster=quota_world["cluster"])
    assert [manifest_hash(m) for *_, m in one] == [manifest_hash(m) for *_, m in two]
