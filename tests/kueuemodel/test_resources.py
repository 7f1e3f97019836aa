"""Quantities and pod requests as the model counts them; selectors and taints as Kubernetes
matches them."""

import pytest

from kueuemodel.resources import format_units, parse_quantity, pod_requests, to_units
from kueuemodel.selectors import label_selector_matches, node_matches, taint_text, untolerated


def test_quantities_become_whole_units_millicores_for_cpu():
    assert to_units("cpu", "500m") == 500 and to_units("cpu", 2) == 2000
    assert to_units("cpu", "0.0001") == 1  # rounded up, as Kueue counts
    assert to_units("memory", "1Gi") == 2**30 and to_units("nvidia.com/gpu", "2") == 2
    assert (format_units("cpu", 1500), format_units("memory", 3 * 2**30)) == ("1500m", "3Gi")
    with pytest.raises(ValueError):
        parse_quantity("lots")


def test_a_pods_requests_add_containers_and_take_the_largest_init_container():
    spec = {
        "containers": [
            {"resources": {"limits": {"nvidia.com/gpu": 2}, "requests": {"cpu": "1"}}},
            {"resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
        ],
        "initContainers": [{"resources": {"requests": {"cpu": "4"}}}],
        "overhead": {"memory": "1Gi"},
    }
    assert pod_requests(spec) == {"nvidia.com/gpu": 2, "cpu": 4000, "memory": 2 * 2**30}


def test_a_null_selector_matches_nothing_and_an_empty_one_everything():
    labels = {"kubernetes.io/metadata.name": "team-a", "tier": "gold"}
    assert not label_selector_matches(None, labels)
    assert label_selector_matches({}, labels)
    expr = {"key": "tier", "operator": "In", "values": ["gold", "silver"]}
    assert label_selector_matches({"matchExpressions": [expr]}, labels)
    assert not label_selector_matches({"matchLabels": {"tier": "bronze"}}, labels)


def test_node_affinity_and_taints():
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "gpu", "operator": "In", "values": ["a100"]}]}]}}}  # fmt: skip
    assert node_matches({"affinity": affinity}, {"gpu": "a100"})
    assert not node_matches({"affinity": affinity, "nodeSelector": {"zone": "x"}}, {"gpu": "a100"})
    taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    soft = {"key": "spot", "effect": "PreferNoSchedule"}
    assert untolerated([taint, soft], []) == [taint]  # only blocking effects count
    assert untolerated([taint], [{"key": "nvidia.com/gpu", "operator": "Exists"}]) == []
    assert untolerated([taint], [{"key": "nvidia.com/gpu", "value": "absent"}]) == [taint]
    assert taint_text(taint) == "nvidia.com/gpu=present:NoSchedule"
