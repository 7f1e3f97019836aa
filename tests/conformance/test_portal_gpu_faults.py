"""The GPU fault loop's taint on the real control plane (issue #35): the NoSchedule taint the
portal writes on a node whose GPU failed keeps new pods of the node's pool off it (Kueue admits
the job, the real scheduler leaves its pod pending on the taint), and removing it lets the pod
land; the node's other taints are left as they were."""

from __future__ import annotations

import time

from cluster.testing import wait_for
from fleet.services.node_taints import (
    GPU_FAULT_TAINT_KEY,
    gpu_fault_taint,
    node_taint_add,
    node_taint_remove,
)
from queues.models import Job

OTHERS_TAINT = {
    "key": "example.com/maintenance-window",
    "value": "sunday",
    "effect": "PreferNoSchedule",
}


def _node(name: str, accelerator: str) -> dict:
    """A node of four L4 GPUs, labelled as GPU feature discovery does, with a taint of someone
    else's that the portal must keep."""
    labels = {
        "kubernetes.io/hostname": name, "accelerator": accelerator,
        "nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-L4",
        "nvidia.com/gpu.count": "4",
    }  # fmt: skip
    capacity = {"cpu": "32", "memory": "128Gi", "pods": "110", "nvidia.com/gpu": "4"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": labels},
            "spec": {"taints": [dict(OTHERS_TAINT)]},
            "status": {"capacity": capacity, "allocatable": capacity}}  # fmt: skip


def _pod_of(portal, job):
    pods = portal.pods(job)
    return pods[0] if pods else None


def test_the_fault_taint_keeps_the_pools_new_pods_off_until_it_is_removed(portal):
    from fleet.services.pools import pool_create

    accelerator = f"l4-fault-{portal.tag}"
    node = portal.add_node(_node(f"l4-fault-{portal.tag}", accelerator))
    with portal.committing():
        pool = pool_create(actor=portal.users["admin"], cluster=portal.cluster,
                           name=f"fault-{portal.tag}", gpu_model=portal.pools["l4"].gpu_model,
                           node_selector={"accelerator": accelerator})  # fmt: skip
    portal.pools[pool.name] = pool
    portal.sync_inventory()
    portal.quota("a", pool.name, 4)
    portal.reconcile()

    taint = gpu_fault_taint(value="gpu2-xid79")
    assert node_taint_add(cluster=portal.cluster, node=node, taint=taint)
    assert node_taint_add(cluster=portal.cluster, node=node, taint=taint)  # once only
    taints = [t.to_dict() for t in portal.core.read_node(node).spec.taints]
    assert [(t["key"], t["effect"]) for t in taints] == [
        (OTHERS_TAINT["key"], "PreferNoSchedule"), (GPU_FAULT_TAINT_KEY, "NoSchedule"),
    ]  # fmt: skip

    # Kueue admits the job (the pool's quota is free), the scheduler keeps its pod off the
    # node: the only node of the pool carries a taint the pod does not tolerate.
    job = portal.submit(name="after the fault", pool=pool.name, gpus_per_worker=2, run="10m")
    job = portal.sync_until(job, (Job.State.ADMITTED, Job.State.RUNNING),
                            check=lambda j: _pod_of(portal, j) is not None)  # fmt: skip

    def unschedulable():
        pod = _pod_of(portal, job)
        conditions = {c.type: c for c in pod.status.conditions or []}
        scheduled = conditions.get("PodScheduled")
        return scheduled is not None and scheduled.reason == "Unschedulable"

    wait_for(unschedulable, timeout=30, what="the pod to be unschedulable on the taint")
    pod = _pod_of(portal, job)
    assert pod.spec.node_name is None
    (scheduled,) = [c for c in pod.status.conditions if c.type == "PodScheduled"]
    # The scheduler counts nodes, it does not name taints: the pool's only node is among those
    # with an untolerated taint (the others match neither the pool's selector nor its taints).
    assert "untolerated taint" in scheduled.message
    time.sleep(2)  # and it stays off
    assert _pod_of(portal, job).spec.node_name is None

    # Returned to service: the taint goes, the pod lands on the node; the other taint stays.
    assert node_taint_remove(cluster=portal.cluster, node=node, key=GPU_FAULT_TAINT_KEY)
    job = portal.sync_until(job, Job.State.RUNNING)
    assert _pod_of(portal, job).spec.node_name == node
    taints = [t.to_dict() for t in portal.core.read_node(node).spec.taints]
    assert [t["key"] for t in taints] == [OTHERS_TAINT["key"]]
