"""The portal registers the real cluster and reads its inventory, and its quota objects are
accepted by the real API server and Kueue's webhooks: pools as ResourceFlavors (the a100 racks
as a Topology), the department as a Cohort, each team as a Namespace with its guard rails, a
ClusterQueue and a LocalQueue, tiers as WorkloadPriorityClasses; Kueue makes the queues active;
a quota request approved by a manager becomes the ClusterQueue's quota; and the drift check
finds the objects as the portal wrote them."""

from __future__ import annotations

from kubernetes import client

from cluster.testing import wait_for
from fleet.models import Node, NodePool
from queues.models import ManagedObject, QuotaRequest
from tests.conformance.objects import is_true


def _flavor_quota(cq: dict, flavor: str, resource: str) -> dict:
    for group in cq["spec"]["resourceGroups"]:
        for entry in group["flavors"]:
            if entry["name"] == flavor:
                return next(r for r in entry["resources"] if r["name"] == resource)
    raise AssertionError(f"no {resource} in flavor {flavor}: {cq['spec']}")


def test_registered_cluster_syncs_every_node_into_its_pool_with_its_gpus(portal):
    """Every kwok node is a Node row in the pool whose labels select it, counted in the resource
    its GPUs are scheduled as: whole GPUs, MIG instances (both strategies), time-sliced shares
    (renamed nvidia.com/gpu.shared or not); each pool's sharing is read from its nodes."""
    portal.cluster.refresh_from_db()
    assert portal.cluster.last_sync_error == ""
    assert portal.cluster.last_sync_at is not None
    by_pool = {}
    for node in Node.objects.filter(cluster=portal.cluster).select_related("pool"):
        assert node.ready, node.name
        by_pool.setdefault(node.pool.name if node.pool else None, []).append(node)
    capacity = {pool: sum(n.gpu_capacity for n in nodes) for pool, nodes in by_pool.items()}
    assert capacity == {
        "a100": 32, "l4": 8, "spot": 8,
        "a100-mig": 28,  # 4 GPUs x 7 instances of 1g.5gb (mixed strategy)
        "a100-mig-single": 4,  # 2 GPUs x 2 instances of 3g.20gb, as nvidia.com/gpu
        "t4-shared": 8,  # 2 GPUs x 4 replicas
        "l4-shared": 8,  # 2 GPUs x 4 replicas, renamed nvidia.com/gpu.shared
    }  # fmt: skip
    pools = {p.name: p for p in NodePool.objects.filter(cluster=portal.cluster)}
    assert (pools["a100-mig"].sharing, pools["a100-mig"].mig_profile) == ("mig", "1g.5gb")
    assert pools["a100-mig"].gpu_resource == "nvidia.com/mig-1g.5gb"
    assert pools["a100-mig-single"].gpu_resource == "nvidia.com/gpu"
    assert pools["t4-shared"].sharing == pools["l4-shared"].sharing == "time-slicing"
    assert pools["t4-shared"].gpu_resource == "nvidia.com/gpu"
    assert pools["l4-shared"].gpu_resource == "nvidia.com/gpu.shared"
    assert pools["a100"].sharing == pools["l4"].sharing == "none"
    assert {n.gpu_model.name for n in by_pool["t4-shared"]} == {"Tesla-T4"}


def test_quota_objects_are_accepted_by_the_api_server_and_kueue(portal):
    portal.quota("a", "l4", 4, borrowing_limit=2)
    portal.quota("a", "a100", 8)
    portal.quota("a", "a100-mig", 7)
    portal.quota("a", "l4-shared", 4)
    portal.quota("b", "l4", 4, lending_limit=2)
    results = portal.reconcile()
    rows = ManagedObject.objects.filter(cluster=portal.cluster)
    refused = {str(r): r.last_error for r in rows if r.last_error}
    assert not refused, refused
    assert "failed" not in results and "retry" not in results, results
    assert all(r.applied_generation == r.desired_generation for r in rows)
    kinds = {r.kind for r in rows}
    assert kinds >= {
        "Namespace", "ResourceFlavor", "Topology", "Cohort", "ClusterQueue", "LocalQueue",
        "WorkloadPriorityClass", "ResourceQuota", "LimitRange", "NetworkPolicy", "RoleBinding",
    }  # fmt: skip
    team = portal.teams["a"]
    cq = wait_for(
        lambda: (
            (q := portal.kueue("clusterqueues", f"qm-{team.slug}")) and is_true(q, "Active") and q
        ),
        what="Kueue to make the team's ClusterQueue active",
    )
    assert cq["spec"]["cohortName"] == f"qm-{portal.department.slug}"
    assert _flavor_quota(cq, "l4", "nvidia.com/gpu")["nominalQuota"] == 4
    assert _flavor_quota(cq, "a100-mig", "nvidia.com/mig-1g.5gb")["nominalQuota"] == 7
    assert _flavor_quota(cq, "l4-shared", "nvidia.com/gpu.shared")["nominalQuota"] == 4
    lq = portal.kueue("localqueues", team.slug, team.namespace)
    assert lq["spec"]["clusterQueue"] == f"qm-{team.slug}"
    flavor = portal.kueue("resourceflavors", "a100")
    assert flavor["spec"]["topologyName"] == "a100"
    assert flavor["spec"]["nodeLabels"] == {"accelerator": "nvidia-a100-80gb"}
    topology = portal.kueue("topologies", "a100")
    assert [lv["nodeLabel"] for lv in topology["spec"]["levels"]] == [
        "cloud.provider.com/topology-rack", "kubernetes.io/hostname",
    ]  # fmt: skip
    assert portal.kueue("workloadpriorityclasses", "production")["value"] == 1000
    quota = client.CoreV1Api(portal.api).read_namespaced_resource_quota(
        "qm-guardrails", team.namespace
    )
    assert quota.spec.hard["requests.nvidia.com/gpu"] == "14"  # 8 A100 + 4 L4 + 2 borrowed
    assert quota.spec.hard["requests.nvidia.com/gpu.shared"] == "4"
    # What the API server and Kueue's webhooks defaulted is no drift: nothing is re-applied.
    from queues.services.reconcile import cluster_check_drift

    drift = cluster_check_drift(cluster_id=portal.cluster.pk)
    drifted = ManagedObject.objects.filter(pk__in=drift["drifted"])
    assert drift["checked"] == rows.count()
    assert not drifted.exists(), [str(r) for r in drifted]


def test_an_approved_quota_request_becomes_the_cluster_queues_quota(portal):
    from queues.services.quotas import quota_request_approve, quota_request_create

    portal.quota("a", "l4", 2)
    portal.reconcile()
    with portal.committing():
        request = quota_request_create(
            actor=portal.users["a"], team=portal.teams["a"], pool=portal.pools["l4"],
            nominal_gpus=6, justification="a bigger sweep",
        )  # fmt: skip
    with portal.committing():
        quota_request_approve(quota_request=request, approver=portal.users["manager"])
    request.refresh_from_db()
    assert request.state == QuotaRequest.State.APPLIED, request.state
    cq = portal.kueue("clusterqueues", f"qm-{portal.teams['a'].slug}")
    assert _flavor_quota(cq, "l4", "nvidia.com/gpu")["nominalQuota"] == 6
