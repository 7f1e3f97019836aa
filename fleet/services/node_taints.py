"""Taints the portal puts on nodes and takes off again (today: a node with a failed GPU).

A taint, not a cordon: `kubectl cordon` (spec.unschedulable) is the admins' own switch, and a
portal that uncordoned a node would undo a cordon someone set for another reason. A taint with
the portal's own key says who set it and why, can be tolerated where someone wants to (a GPU
burn-in job), and is removed by key without touching anyone else's taints. NoSchedule keeps new
pods off the node; pods already there run on (the portal stops and resubmits the jobs that held
the failed GPU; jobs on the node's healthy GPUs are left alone).

Node taints are one list (`listType: atomic`), so server-side apply would make the portal the
owner of every taint on the node: the list is read, changed and written back with its
resourceVersion (a write that lost a race answers 409 and the next tick tries again).
"""

from __future__ import annotations

from django.utils import timezone

from fleet import kube
from fleet.models import Cluster, Node

GPU_FAULT_TAINT_KEY = "quartermaster.dev/gpu-fault"


def gpu_fault_taint(*, value: str) -> dict:
    """The taint a node with a failed GPU carries (value: which GPU and why, e.g. gpu2-xid79)."""
    return {"key": GPU_FAULT_TAINT_KEY, "value": value, "effect": "NoSchedule"}


def _write(cluster: Cluster, node: str, change) -> bool:
    """Apply change(taints) -> taints to the node; True when it was written (or is gone)."""
    client = kube.client_for(cluster)
    obj = client.get("v1", "Node", node)
    if obj is None:
        return False
    taints = list((obj.get("spec") or {}).get("taints") or [])
    wanted = change(taints)
    if wanted == taints:
        return True
    client.patch(
        "v1",
        "Node",
        node,
        {
            "metadata": {"resourceVersion": obj["metadata"].get("resourceVersion")},
            "spec": {"taints": wanted or None},
        },
    )
    Node.objects.filter(cluster=cluster, name=node).update(
        taints=wanted, last_seen_at=timezone.now()
    )
    return True


def node_taint_add(*, cluster: Cluster, node: str, taint: dict) -> bool:
    """Put the taint on the node unless one with its key and effect is there; False when the
    node does not exist. Raises kube.KubeError when the cluster refuses or does not answer."""

    def change(taints):
        mine = (taint["key"], taint["effect"])
        same = [t for t in taints if (t.get("key"), t.get("effect")) == mine]
        return taints if same else [*taints, dict(taint)]

    return _write(cluster, node, change)


def node_taint_remove(*, cluster: Cluster, node: str, key: str) -> bool:
    """Take every taint with this key off the node (others' taints stay); False when the node
    does not exist."""
    return _write(cluster, node, lambda taints: [t for t in taints if t.get("key") != key])
