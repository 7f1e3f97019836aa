"""Spot capacity reclaimed under running jobs: a node tainted NoExecute has its pods evicted by
the taint manager, a node removed from the cluster has its pods collected (both mark the pod
with a DisruptionTarget condition), and a Job whose podFailurePolicy ignores disruptions
replaces them on another node without counting a failure (Kubernetes' "Taints and Tolerations",
"Pod disruption conditions" and the Job's pod failure policy)."""

from __future__ import annotations

import contextlib

from tests.scenarios import objects as o
from tests.scenarios.objects import GPU, SPOT_TOLERATION

NOTICE = {"key": "cloud.google.com/impending-node-termination", "effect": "NoExecute"}
IGNORE_DISRUPTIONS = {
    "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]
}


def _spot_job(sc, cluster):
    ns, _, _ = sc.team("spot", 8, tolerations=[SPOT_TOLERATION])
    sc.create(o.job("resilient", "lq", {GPU: 1}, annotations=cluster.runs(600),
                    pod_failure_policy=IGNORE_DISRUPTIONS), ns)  # fmt: skip
    (pod,) = sc.wait_running(ns, "job-name=resilient")
    return ns, pod


def _replacement(sc, ns, first):
    """The Job's running pod that is not `first`, once there is one."""
    pods = sc.running(ns, "job-name=resilient") or []
    return next((p for p in pods if p.metadata.uid != first.metadata.uid), None)


@contextlib.contextmanager
def _tainted(sc, node: str, taint: dict):
    sc.core.patch_node(node, {"spec": {"taints": [*_taints(sc, node), taint]}})
    try:
        yield
    finally:
        kept = [t for t in _taints(sc, node) if t["key"] != taint["key"]]
        sc.core.patch_node(node, {"spec": {"taints": kept}})


def _taints(sc, node: str) -> list[dict]:
    return [{"key": t.key, "value": t.value, "effect": t.effect}
            for t in sc.core.read_node(node).spec.taints or []]  # fmt: skip


def test_a_notice_taint_evicts_the_pods_and_the_job_replaces_them_elsewhere(sc, cluster):
    ns, first = _spot_job(sc, cluster)
    node = first.spec.node_name
    since = sc.core.read_namespaced_pod(first.metadata.name, ns).metadata.resource_version
    with _tainted(sc, node, NOTICE):
        # The DisruptionTarget conditions the first pod carried until it was deleted.
        seen = [c for _, pod in sc.pod_changes(ns, first.metadata.name, since)
                for c in pod.status.conditions or [] if c.type == "DisruptionTarget"]  # fmt: skip
        replacement = sc.wait(lambda: _replacement(sc, ns, first), "a replacement pod running")
        assert replacement.spec.node_name != node
        assert seen and seen[-1].reason == "DeletionByTaintManager"
        job = sc.get("Job", "resilient", ns)
        assert not job["status"].get("failed")
        assert sc.admitted(ns, "resilient")


def test_a_removed_node_has_its_pods_collected_and_the_job_replaces_them(sc, cluster):
    ns, first = _spot_job(sc, cluster)
    node = sc.core.read_node(first.spec.node_name)
    spec = cluster.api.sanitize_for_serialization(node)
    for key in ("uid", "resourceVersion", "creationTimestamp", "managedFields"):
        spec["metadata"].pop(key, None)
    # Created again as a kubelet registers its node: with its capacity in the status.
    spec["status"] = {k: spec["status"][k] for k in ("capacity", "allocatable", "conditions")}
    sc.core.delete_node(node.metadata.name)
    try:
        replacement = sc.wait(lambda: _replacement(sc, ns, first), "a replacement pod running",
                              timeout=150)  # fmt: skip
        assert replacement.spec.node_name != node.metadata.name
        job = sc.get("Job", "resilient", ns)
        assert not job["status"].get("failed")
    finally:
        sc.core.create_node(spec)
        sc.wait(lambda: any(c.type == "Ready" and c.status == "True" for c in
                            (sc.core.read_node(node.metadata.name).status.conditions or [])),
                "the node back and ready")  # fmt: skip
