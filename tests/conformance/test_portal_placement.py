"""Where the portal's jobs land on the real control plane: topology-aware placement by real Kueue
for a batch Job, a PyTorchJob and a JobSet (their pod sets kept in one rack), MIG instances
in both strategies, a MIG node that offers several profiles (the pool counts the one its admin
names), time-sliced shares (renamed nvidia.com/gpu.shared or not), and spot capacity taken
back by the provider (a worker replaced, not counted as a failure)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from fleet.models import Node
from queues.models import Job
from tests.conformance.portal import RACK_LABEL

S = Job.State


def _nodes(portal, job, *, workers_only=False) -> dict[str, dict]:
    """node name -> labels, of the nodes the job's pods (or its workers') run on."""
    pods = [p for p in portal.pods(job) if p.spec.node_name]
    if workers_only:  # a JobSet's driver is not placed with its workers
        pods = [p for p in pods if "-driver-" not in p.metadata.name]
    return {p.spec.node_name: portal.core.read_node(p.spec.node_name).metadata.labels for p in pods}


def _running(portal, job, count):
    return portal.sync_until(job, S.RUNNING, check=lambda j: len(_nodes(portal, j)) and len(
        [p for p in portal.pods(j) if p.status.phase == "Running"]) == count)  # fmt: skip


@pytest.fixture
def racks(portal):
    portal.quota("a", "a100", 32)
    portal.reconcile()
    return portal


@pytest.mark.parametrize(
    ("kind", "extra", "pods"),
    [
        ("job", {}, 4),
        ("pytorchjob", {}, 4),  # a master and three workers, one group
        ("jobset", {"driver_command": ["python", "driver.py"]}, 5),  # and a CPU driver
    ],
)
def test_a_job_of_every_kind_is_kept_within_one_rack(racks, client, kind, extra, pods):
    """Four workers of 4 GPUs fit in one rack (two 8-GPU nodes) only if Kueue places every pod
    set of the job's workers there (a PyTorchJob's master with its workers): a free placement
    would spread them over both racks' nodes. A JobSet's CPU driver goes anywhere."""
    job = racks.submit(name=f"ring {kind}", kind=kind, pool="a100", workers=4, gpus_per_worker=4,
                       run="10m", topology_level="rack", **extra)  # fmt: skip
    job = _running(racks, job, pods)
    placed = _nodes(racks, job, workers_only=True)
    assert len({labels[RACK_LABEL] for labels in placed.values()}) == 1, placed
    workload = racks.kueue("workloads", job.workload_name, job.team.namespace)
    requests = {ps["name"]: ps.get("topologyRequest") or {} for ps in workload["spec"]["podSets"]}
    assert {n: r.get("required") for n, r in requests.items()} == {
        n: None if n == "driver" else RACK_LABEL for n in requests
    }  # fmt: skip
    client.force_login(racks.users["a"])
    page = client.get(reverse("job-detail", args=[job.pk])).content.decode()
    (rack,) = {labels[RACK_LABEL] for labels in placed.values()}
    assert f"ran in {rack}" in page


def test_mig_instances_of_both_strategies_run_where_their_pool_is(portal):
    portal.quota("a", "a100-mig", 7)
    portal.quota("a", "a100-mig-single", 4)
    portal.reconcile()
    mixed = portal.submit(name="mixed", pool="a100-mig", gpus_per_worker=3, run="10m")
    single = portal.submit(name="single", pool="a100-mig-single", gpus_per_worker=2, run="10m")
    for job, resource, node in (
        (mixed, "nvidia.com/mig-1g.5gb", "a100-mig-node-0"),
        (single, "nvidia.com/gpu", "a100-mig-single-node-0"),
    ):
        job = _running(portal, job, 1)
        (pod,) = portal.pods(job)
        assert pod.spec.containers[0].resources.limits[resource] == str(job.gpus_per_worker)
        assert pod.spec.node_name == node
        assert job.admitted_pool == job.pool
        assert job.pods.get().gpus == job.gpus_per_worker
    portal.sync_inventory()
    assert Node.objects.get(name="a100-mig-node-0").gpu_allocated == 3


def _mig_node(name: str, accelerator: str) -> dict:
    """An A100 80GB node whose two GPUs are each partitioned 3g.40gb + 2g.20gb + 2 x 1g.10gb
    (mixed strategy), labelled as GPU feature discovery does."""
    counts = {"3g.40gb": 2, "2g.20gb": 2, "1g.10gb": 4}
    labels = {
        "kubernetes.io/hostname": name, "accelerator": accelerator,
        "nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
        "nvidia.com/gpu.count": "2", "nvidia.com/mig.capable": "true",
        "nvidia.com/mig.strategy": "mixed",
        **{f"nvidia.com/mig-{p}.count": str(c) for p, c in counts.items()},
    }  # fmt: skip
    capacity = {"cpu": "64", "memory": "512Gi", "pods": "110",
                **{f"nvidia.com/mig-{p}": str(c) for p, c in counts.items()}}  # fmt: skip
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
            "status": {"capacity": capacity, "allocatable": capacity}}  # fmt: skip


def test_a_mig_node_with_several_profiles_serves_the_profile_its_pool_counts(portal):
    from fleet.services.pools import pool_create, pool_update

    accelerator = f"a100-multi-{portal.tag}"
    node = portal.add_node(_mig_node(f"mig-multi-{portal.tag}", accelerator))
    admin = portal.users["admin"]
    with portal.committing():
        pool = pool_create(actor=admin, cluster=portal.cluster, name=f"multi-{portal.tag}",
                           gpu_model=portal.pools["a100"].gpu_model,
                           node_selector={"accelerator": accelerator})  # fmt: skip
    portal.sync_inventory()
    pool.refresh_from_db()
    # The profile of which the node has the most instances, until an admin names another.
    assert (pool.sharing, pool.mig_profile, pool.gpu_resource) == (
        "mig", "1g.10gb", "nvidia.com/mig-1g.10gb",
    )  # fmt: skip
    assert Node.objects.get(name=node).gpu_capacity == 4
    with pytest.raises(Exception) as refused:
        pool_update(actor=admin, pool=pool, mig_profile="7g.80gb")
    assert "the profiles all of them offer: 1g.10gb, 2g.20gb, 3g.40gb" in str(refused.value)
    with portal.committing():
        pool = pool_update(actor=admin, pool=pool, mig_profile="3g.40gb")
    portal.sync_inventory()
    pool.refresh_from_db()
    assert (pool.mig_profile, pool.gpu_resource) == ("3g.40gb", "nvidia.com/mig-3g.40gb")
    assert Node.objects.get(name=node).gpu_capacity == 2
    portal.pools[pool.name] = pool
    portal.quota("a", pool.name, 2)
    portal.reconcile()
    job = portal.submit(name="big slices", pool=pool.name, gpus_per_worker=2, run="10m")
    job = _running(portal, job, 1)
    (pod,) = portal.pods(job)
    assert pod.spec.node_name == node
    assert pod.spec.containers[0].resources.limits["nvidia.com/mig-3g.40gb"] == "2"
    portal.sync_inventory()
    assert Node.objects.get(name=node).gpu_allocated == 2  # of its 3g.40gb instances only


def test_time_sliced_shares_are_requested_as_the_device_plugin_advertises_them(portal):
    portal.quota("a", "l4-shared", 4)
    portal.quota("a", "t4-shared", 2)
    portal.reconcile()
    renamed = portal.submit(name="notebooks", pool="l4-shared", workers=3, run="10m")
    plain = portal.submit(name="inference", pool="t4-shared", run="10m")
    for job, resource, node in (
        (renamed, "nvidia.com/gpu.shared", "l4-shared-node-0"),
        (plain, "nvidia.com/gpu", "t4-shared-node-0"),
    ):
        job = _running(portal, job, job.workers)
        for pod in portal.pods(job):
            assert pod.spec.containers[0].resources.limits == {
                resource: "1", "memory": pod.spec.containers[0].resources.limits["memory"],
            }  # fmt: skip
            assert pod.spec.node_name == node
        assert set(job.pods.values_list("gpus", flat=True)) == {1}
    portal.sync_inventory()
    assert Node.objects.get(name="l4-shared-node-0").gpu_allocated == 3


def test_a_spot_worker_whose_node_is_taken_back_is_replaced_without_counting(portal):
    """The provider takes a spot node back: it is tainted out of service (NoExecute), the
    taint manager evicts its pods with a DisruptionTarget condition, the Job's pod failure
    policy ignores them and a new worker starts on another spot node."""
    portal.quota("a", "spot", 8)
    portal.reconcile()
    job = portal.submit(name="cheap", pool="spot", gpus_per_worker=2, run="10m",
                        interruptible=True, retry_limit=0)  # fmt: skip
    job = _running(portal, job, 1)
    (first,) = portal.pods(job)
    taken = first.spec.node_name
    taint = {"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown",
             "effect": "NoExecute"}  # fmt: skip
    node = portal.core.read_node(taken)
    portal.core.patch_node(taken, {"spec": {"taints": [*(node.spec.taints or []), taint]}})
    try:
        job = portal.sync_until(
            job, S.RUNNING, timeout=60,
            check=lambda j: j.pods.filter(interrupted=True).exists()
            and [p for p in portal.pods(j) if p.status.phase == "Running"],
        )  # fmt: skip
    finally:
        portal.core.patch_node(taken, {"spec": {"taints": node.spec.taints}})
    (now,) = [p for p in portal.pods(job) if p.status.phase == "Running"]
    assert now.spec.node_name != taken
    assert portal.core.read_node(now.spec.node_name).metadata.labels["accelerator"] == (
        "nvidia-l4-spot"
    )
    assert job.retries == 0 and job.state == S.RUNNING
    reasons = [t.reason for t in job.transitions.all()]
    assert any(f"because node {taken} was taken back" in r for r in reasons), reasons
