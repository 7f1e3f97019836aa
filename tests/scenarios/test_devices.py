"""GPUs as the NVIDIA device plugin and GPU feature discovery advertise them, and Kueue's quota in
those resources: MIG in the mixed strategy (a resource per profile) and the single strategy
(instances as nvidia.com/gpu), time-slicing (each GPU advertised `replicas` times), and
time-slicing with `renameByDefault` (the resource becomes nvidia.com/gpu.shared and the product
label keeps its name). The fleet (cluster/fleet.yaml) has a pool of each."""

from __future__ import annotations

from tests.scenarios import objects as o
from tests.scenarios.objects import GPU, SHARED_GPU

MIG = "nvidia.com/mig-1g.5gb"


def _node(sc, name: str):
    return sc.core.read_node(name)


def _queue(sc, pool: str, resource: str, quota: int) -> tuple[str, str]:
    ns = sc.namespace()
    flavor, cq = sc.unique(pool), sc.unique("cq")
    sc.create(o.flavor(flavor, pool))
    sc.create(o.cluster_queue(cq, {flavor: [o.quota(quota, resource=resource)]}, namespaces=[ns]))
    sc.create(o.local_queue("lq", cq), ns)
    return ns, flavor


def test_a_mixed_strategy_mig_node_advertises_its_profile_and_no_whole_gpus(sc):
    node = _node(sc, "a100-mig-node-0")
    assert node.status.allocatable[MIG] == "28"  # 4 GPUs x 7 instances
    assert GPU not in node.status.allocatable
    labels = node.metadata.labels
    assert labels["nvidia.com/mig.strategy"] == "mixed"
    assert labels["nvidia.com/mig-1g.5gb.count"] == "28"


def test_mig_instances_are_quota_admitted_and_bound_like_gpus(sc, cluster):
    ns, flavor = _queue(sc, "a100-mig", MIG, 4)
    sc.create(o.job("small", "lq", {MIG: 1}, workers=3, annotations=cluster.runs(600)), ns)
    wl = sc.wait_admitted(ns, "small")
    assert wl["status"]["admission"]["podSetAssignments"][0]["resourceUsage"] == {MIG: "3"}
    pods = sc.wait_running(ns, "job-name=small", 3)
    assert {p.spec.node_name for p in pods} == {"a100-mig-node-0"}
    # Quota counts instances: 3 of 4 are used, two more wait.
    sc.create(o.job("over", "lq", {MIG: 1}, workers=2, annotations=cluster.runs(600)), ns)
    assert sc.wait_pending(ns, "over") == (
        f"couldn't assign flavors to pod set main: insufficient unused quota for {MIG} in "
        f"flavor {flavor}, 1 more needed"
    )


def test_a_single_strategy_mig_node_advertises_instances_as_gpus(sc, cluster):
    node = _node(sc, "a100-mig-single-node-0")
    assert node.status.allocatable[GPU] == "4"  # 2 GPUs x 2 instances of 3g.20gb
    labels = node.metadata.labels
    assert labels["nvidia.com/mig.strategy"] == "single"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB-MIG-3g.20gb"
    ns, _ = _queue(sc, "a100-mig-single", GPU, 4)
    sc.create(o.job("four", "lq", {GPU: 1}, workers=4, annotations=cluster.runs(600)), ns)
    pods = sc.wait_running(ns, "job-name=four", 4)
    assert {p.spec.node_name for p in pods} == {"a100-mig-single-node-0"}


def test_a_time_sliced_gpu_is_shared_by_as_many_pods_as_it_has_replicas(sc, cluster):
    node = _node(sc, "t4-shared-node-0")
    assert node.status.allocatable[GPU] == "8"  # 2 GPUs x 4 replicas
    labels = node.metadata.labels
    assert labels["nvidia.com/gpu.replicas"] == "4"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert labels["nvidia.com/gpu.product"] == "Tesla-T4-SHARED"
    ns, _ = _queue(sc, "t4-shared", GPU, 16)
    sc.create(o.job("slices", "lq", {GPU: 1}, workers=8, annotations=cluster.runs(600)), ns)
    pods = sc.wait_running(ns, "job-name=slices", 8)
    assert {p.spec.node_name for p in pods} == {"t4-shared-node-0"}
    # A ninth replica does not exist: its pod is admitted by quota but cannot be scheduled.
    sc.create(o.job("ninth", "lq", {GPU: 1}, annotations=cluster.runs(600)), ns)
    sc.wait_admitted(ns, "ninth")

    def unschedulable():
        (pod,) = sc.pods(ns, "job-name=ninth") or [None]
        conditions = {c.type: c for c in (pod and pod.status.conditions) or []}
        scheduled = conditions.get("PodScheduled")
        return scheduled if scheduled and scheduled.reason == "Unschedulable" else None

    scheduled = sc.wait(unschedulable, "the ninth pod unschedulable")
    assert "Insufficient nvidia.com/gpu" in scheduled.message


def test_rename_by_default_advertises_shared_gpus_under_their_own_name(sc, cluster):
    node = _node(sc, "l4-shared-node-0")
    assert node.status.allocatable[SHARED_GPU] == "8"  # 2 GPUs x 4 replicas
    assert GPU not in node.status.allocatable
    labels = node.metadata.labels
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-L4"  # not marked -SHARED when renamed
    assert labels["nvidia.com/gpu.replicas"] == "4"
    ns, flavor = _queue(sc, "l4-shared", SHARED_GPU, 8)
    sc.create(o.job("shared", "lq", {SHARED_GPU: 1}, workers=2, annotations=cluster.runs(600)),
              ns)  # fmt: skip
    wl = sc.wait_admitted(ns, "shared")
    assert wl["status"]["admission"]["podSetAssignments"][0]["flavors"] == {SHARED_GPU: flavor}
    pods = sc.wait_running(ns, "job-name=shared", 2)
    assert {p.spec.node_name for p in pods} == {"l4-shared-node-0"}
    # A job that asks for nvidia.com/gpu cannot land there.
    sc.create(o.pod("whole", {GPU: 1}, node_selector={o.POOL_LABEL: "l4-shared"},
                    annotations=cluster.runs(600)), ns)  # fmt: skip

    def unschedulable():
        pod = sc.core.read_namespaced_pod("whole", ns)
        conditions = {c.type: c for c in pod.status.conditions or []}
        scheduled = conditions.get("PodScheduled")
        return scheduled if scheduled and scheduled.reason == "Unschedulable" else None

    assert "Insufficient nvidia.com/gpu" in sc.wait(unschedulable, "unschedulable").message
