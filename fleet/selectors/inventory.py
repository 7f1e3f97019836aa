"""Reads of the inventory: pools (every signed-in user), their live GPU figures, nodes (platform
admins) and the GPU model catalogue."""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import ExpressionWrapper, F, IntegerField, Max, Min, Q, QuerySet

from core.roles import is_platform_admin
from fleet.models import Cluster, GpuModel, Node, NodePool
from fleet.quantities import DEFAULT_CPU_PER_GPU_MILLIS, DEFAULT_MEMORY_PER_GPU_MIB, WorkerSize


def pool_list(*, user) -> QuerySet[NodePool]:
    """Node pools: every logged-in user sees them all (they submit jobs and ask quota there)."""
    if not user.is_authenticated:
        return NodePool.objects.none()
    return (
        NodePool.objects.filter(cluster__deleted_at__isnull=True)
        .select_related("cluster", "gpu_model")
        .order_by("cluster__name", "name")
    )


def _empty_stats() -> dict:
    return {
        "nodes": 0,
        "ready_nodes": 0,
        "gpus_total": 0,
        "gpus_allocatable": 0,
        "gpus_allocated": 0,
        "gpus_free": 0,
        "cordoned_nodes": 0,
        "free_blocks": [],
        "largest_free_block": 0,
    }


def node_free_gpus(node: Node) -> int:
    """GPUs on a node that can take new work (none on cordoned or not-ready nodes)."""
    if node.unschedulable or not node.ready:
        return 0
    return max(0, node.gpu_allocatable - node.gpu_allocated)


def pool_stats(*, pools: Iterable[NodePool | int]) -> dict[int, dict]:
    """Per pool id: node and GPU counts, cordoned nodes, free GPUs per node, largest free block.

    free_blocks lists the free GPUs of each node (largest first): a job needing N GPUs on one
    node fits only where a block is >= N, so many small blocks mean fragmentation.
    """
    ids = [p if isinstance(p, int) else p.pk for p in pools]
    stats = {pk: _empty_stats() for pk in ids}
    nodes = Node.objects.filter(pool_id__in=ids).only(
        "pool_id", "gpu_capacity", "gpu_allocatable", "gpu_allocated", "unschedulable", "ready"
    )
    for node in nodes:
        entry = stats[node.pool_id]
        free = node_free_gpus(node)
        entry["nodes"] += 1
        entry["ready_nodes"] += node.ready
        entry["gpus_total"] += node.gpu_capacity
        entry["gpus_allocatable"] += node.gpu_allocatable
        entry["gpus_allocated"] += node.gpu_allocated
        entry["gpus_free"] += free
        entry["cordoned_nodes"] += node.unschedulable
        entry["free_blocks"].append(free)
    for entry in stats.values():
        entry["free_blocks"].sort(reverse=True)
        entry["largest_free_block"] = entry["free_blocks"][0] if entry["free_blocks"] else 0
    return stats


def pool_domains(*, pool: NodePool, gpus_per_worker: int = 0) -> dict[str, list[dict]]:
    """Per topology level of the pool (by name): its domains, widest level first, each with
    GPUs (allocatable, cordoned nodes included), free GPUs (on schedulable ready nodes) and,
    when gpus_per_worker is given, how many such workers fit now and on an empty domain
    (workers must each fit on one node). Nodes without the level's label are in no domain of
    it. Empty when the pool has no topology."""
    levels = pool.topology_levels or []
    if not levels:
        return {}
    nodes = Node.objects.filter(pool=pool).only(
        "name", "labels", "gpu_allocatable", "gpu_allocated", "unschedulable", "ready"
    )
    out: dict[str, dict[str, dict]] = {lv["name"]: {} for lv in levels}
    for node in nodes:
        # A cordoned or not-ready node is back later: it counts for what could ever fit.
        free, usable = node_free_gpus(node), node.gpu_allocatable
        for level in levels:
            value = (node.labels or {}).get(level["node_label"])
            if value is None:
                continue
            entry = out[level["name"]].setdefault(
                value, {"domain": value, "nodes": 0, "gpus": 0, "free": 0, "fit": 0, "fit_empty": 0}
            )
            entry["nodes"] += 1
            entry["gpus"] += usable
            entry["free"] += free
            if gpus_per_worker:
                entry["fit"] += free // gpus_per_worker
                entry["fit_empty"] += usable // gpus_per_worker
    return {
        name: sorted(domains.values(), key=lambda d: d["domain"]) for name, domains in out.items()
    }


def pool_list_with_stats(*, user) -> list[NodePool]:
    """Visible pools, each with a .stats dict (two queries in all)."""
    pools = list(pool_list(user=user))
    stats = pool_stats(pools=pools)
    for pool in pools:
        pool.stats = stats[pool.pk]
    return pools


def node_list(
    *, user, pool: NodePool | None = None, cluster: Cluster | None = None, unpooled: bool = False
):
    """Nodes (platform admins only), optionally of one pool or cluster, or those in no pool."""
    if not is_platform_admin(user):
        return Node.objects.none()
    nodes = Node.objects.select_related("cluster", "pool", "gpu_model")
    if pool is not None:
        nodes = nodes.filter(pool=pool)
    if cluster is not None:
        nodes = nodes.filter(cluster=cluster)
    if unpooled:
        nodes = nodes.filter(pool__isnull=True)
    return nodes.order_by("cluster__name", "name")


def gpu_model_list(*, user) -> QuerySet[GpuModel]:
    """The GPU model catalogue (every logged-in user)."""
    if not user.is_authenticated:
        return GpuModel.objects.none()
    return GpuModel.objects.order_by("name")


def pool_worker_sizes(*, pools: Iterable[NodePool]) -> dict[int, WorkerSize]:
    """Per pool id, its WorkerSize, in one query. The share per GPU is the smallest GPU node's
    allocatable CPU and memory divided by its GPUs, so a worker of the default size fits on any
    node of the pool with its GPUs; the pool's settings override it."""
    pools = list(pools)
    rows = {
        row["pool_id"]: row
        for row in Node.objects.filter(pool__in=pools)
        .order_by()
        .values("pool_id")
        .annotate(
            max_cpu=Max("cpu_allocatable_millis"),
            max_memory=Max("memory_allocatable_mib"),
            cpu_share=Min(
                ExpressionWrapper(
                    F("cpu_allocatable_millis") / F("gpu_allocatable"), IntegerField()
                ),
                filter=Q(gpu_allocatable__gt=0, cpu_allocatable_millis__gt=0),
            ),
            memory_share=Min(
                ExpressionWrapper(
                    F("memory_allocatable_mib") / F("gpu_allocatable"), IntegerField()
                ),
                filter=Q(gpu_allocatable__gt=0, memory_allocatable_mib__gt=0),
            ),
        )
    }
    out = {}
    for pool in pools:
        row = rows.get(pool.pk) or {}
        out[pool.pk] = WorkerSize(
            cpu_per_gpu_millis=pool.cpu_per_gpu_millis
            or row.get("cpu_share")
            or DEFAULT_CPU_PER_GPU_MILLIS,
            memory_per_gpu_mib=pool.memory_per_gpu_mib
            or row.get("memory_share")
            or DEFAULT_MEMORY_PER_GPU_MIB,
            max_cpu_millis=row.get("max_cpu") or None,
            max_memory_mib=row.get("max_memory") or None,
        )
    return out
