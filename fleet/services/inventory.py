"""Inventory sync: nodes and GPU pods from the cluster into Node rows, matched to pools.

A node's GPUs are counted in the resource they are scheduled as: `nvidia.com/gpu`, or on a MIG
node (GPU feature discovery's `nvidia.com/mig.strategy: mixed`) the instances of its one MIG
profile (`nvidia.com/mig-<profile>`). A pool's sharing mode follows its nodes: MIG with that
profile when they all have it, time-slicing when they are labelled
`nvidia.com/gpu.sharing-strategy: time-slicing`, else whole GPUs; a change is announced
(`pool_saved`) so that the pool's queues are rendered in its unit."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from django.db import transaction
from django.utils import timezone

from fleet import kube
from fleet.models import Cluster, GpuModel, Node, NodePool
from fleet.models.inventory import GPU_RESOURCE, MIG_RESOURCE_PREFIX
from fleet.quantities import cpu_millis, memory_mib
from fleet.services.pools import pool_saved

logger = logging.getLogger(__name__)

PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"


@dataclass
class SyncResult:
    """What one inventory sync saw and changed."""

    nodes: int = 0
    created: int = 0
    removed: int = 0
    unpooled: int = 0
    gpu_models_created: list[str] = field(default_factory=list)
    error: str = ""


SYNCED_NODE_FIELDS = (
    "pool_id",
    "gpu_model_id",
    "gpu_capacity",
    "gpu_allocatable",
    "gpu_allocated",
    "cpu_allocatable_millis",
    "memory_allocatable_mib",
    "labels",
    "taints",
    "unschedulable",
    "ready",
    "conditions",
    "last_seen_at",
)


def _gpu_count(value) -> int:
    try:
        return max(0, int(str(value)))
    except (TypeError, ValueError):
        return 0


def _pod_gpus(pod: dict) -> int:
    """GPUs a pod holds: the sum over containers, or the largest init container's if larger."""
    spec = pod.get("spec") or {}

    def container_gpus(container):
        resources = container.get("resources") or {}
        limits = resources.get("limits") or {}
        requests = resources.get("requests") or {}
        return sum(
            _gpu_count(requests.get(name, limits.get(name, 0)))
            for name in {*requests, *limits}
            if name == GPU_RESOURCE or name.startswith(MIG_RESOURCE_PREFIX)
        )

    main = sum(container_gpus(c) for c in spec.get("containers") or [])
    init = max((container_gpus(c) for c in spec.get("initContainers") or []), default=0)
    return max(main, init)


def _accelerator(labels: dict, capacity: dict) -> tuple[str, str]:
    """(resource the node's GPUs are scheduled as, its MIG profile or "")."""
    if labels.get("nvidia.com/mig.strategy") == "single":
        # Single strategy: instances are nvidia.com/gpu; the product names the profile.
        _, sep, profile = labels.get(PRODUCT_LABEL, "").partition("-MIG-")
        return GPU_RESOURCE, profile if sep else ""
    profiles = [
        name.removeprefix(MIG_RESOURCE_PREFIX)
        for name in capacity
        if name.startswith(MIG_RESOURCE_PREFIX) and _gpu_count(capacity[name])
    ]
    if labels.get("nvidia.com/mig.strategy") == "mixed" and len(profiles) == 1:
        return f"{MIG_RESOURCE_PREFIX}{profiles[0]}", profiles[0]
    return GPU_RESOURCE, ""


def _sharing(entries: list[tuple[str, bool, str]]) -> tuple[str, str, str]:
    """A pool's (sharing mode, MIG profile, MIG strategy) from its nodes' (profile,
    time-sliced, strategy)."""
    profiles = {(profile, strategy) for profile, _, strategy in entries}
    if len(profiles) == 1 and next(iter(profiles))[0]:
        profile, strategy = profiles.pop()
        return NodePool.Sharing.MIG, profile, strategy
    if any(sliced for _, sliced, _ in entries):
        return NodePool.Sharing.TIME_SLICING, "", ""
    return NodePool.Sharing.NONE, "", ""


def _match_pool(labels: dict, pools: list[NodePool]) -> NodePool | None:
    matching = [
        p
        for p in pools
        if p.node_selector and all(labels.get(k) == v for k, v in p.node_selector.items())
    ]
    # The most specific selector wins when pools overlap.
    matching.sort(key=lambda p: (-len(p.node_selector), p.name))
    return matching[0] if matching else None


def _gpu_model_for(product: str, models: list[GpuModel], result: SyncResult, labels: dict):
    if not product:
        return None
    # GPU feature discovery marks time-sliced GPUs' product "-SHARED", and names the MIG
    # profile in it under the single strategy ("...-MIG-1g.10gb"): the same model.
    product = product.removesuffix("-SHARED").partition("-MIG-")[0]
    for model in models:
        if product in (model.product_labels or []):
            return model
    name = product.removeprefix("NVIDIA-")[:100]
    memory = _gpu_count(labels.get(GPU_MEMORY_LABEL)) or None
    model, created = GpuModel.objects.get_or_create(
        name=name, defaults={"product_labels": [product], "memory_mib": memory}
    )
    if not created:
        model.product_labels = [*(model.product_labels or []), product]
        model.save(update_fields=["product_labels"])
    else:
        result.gpu_models_created.append(name)
    models.append(model)
    return model


def _fetch(cluster: Cluster) -> tuple[list[dict], list[dict]]:
    client = kube.client_for(cluster)
    nodes = client.list("v1", "Node")
    pods = client.list("v1", "Pod", field_selector="status.phase!=Succeeded,status.phase!=Failed")
    return nodes, pods


def cluster_sync_inventory(*, cluster: Cluster) -> SyncResult:
    """Read nodes and GPU pods from the cluster into Node rows; record the outcome on Cluster.

    Raises kube.TransientError (after storing it) so the task can retry; permanent errors are
    stored on the cluster and returned in the result.
    """
    result = SyncResult()
    try:
        raw_nodes, raw_pods = _fetch(cluster)
    except kube.KubeError as exc:
        result.error = str(exc)
        Cluster.objects.filter(pk=cluster.pk).update(last_sync_error=result.error)
        cluster.last_sync_error = result.error
        if isinstance(exc, kube.TransientError):
            raise
        return result

    allocated: dict[str, int] = {}
    for pod in raw_pods:
        node_name = (pod.get("spec") or {}).get("nodeName")
        gpus = _pod_gpus(pod) if node_name else 0
        if gpus:
            allocated[node_name] = allocated.get(node_name, 0) + gpus

    now = timezone.now()
    with transaction.atomic():
        # One sync per cluster at a time; a second waits and then writes fresher data.
        Cluster.objects.select_for_update().get(pk=cluster.pk)
        pools = list(NodePool.objects.filter(cluster=cluster))
        models = list(GpuModel.objects.all())
        existing = {n.name: n for n in Node.objects.filter(cluster=cluster)}
        seen, new, updated = set(), [], []
        sharing: dict[int, list[tuple[str, bool, str]]] = {}
        for raw in raw_nodes:
            meta, spec, status = (raw.get(k) or {} for k in ("metadata", "spec", "status"))
            name = meta["name"]
            seen.add(name)
            labels = meta.get("labels") or {}
            conditions = status.get("conditions") or []
            ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
            pool = _match_pool(labels, pools)
            allocatable = status.get("allocatable") or {}
            capacity = status.get("capacity") or {}
            accel, profile = _accelerator(labels, capacity)
            if pool is not None:
                sliced = labels.get("nvidia.com/gpu.sharing-strategy") == "time-slicing"
                strategy = labels.get("nvidia.com/mig.strategy", "") if profile else ""
                sharing.setdefault(pool.pk, []).append((profile, sliced, strategy))
            model = _gpu_model_for(labels.get(PRODUCT_LABEL, ""), models, result, labels)
            values = {
                "pool_id": pool.pk if pool else None,
                "gpu_model_id": model.pk if model else None,
                "gpu_capacity": _gpu_count(capacity.get(accel)),
                "gpu_allocatable": _gpu_count(allocatable.get(accel)),
                "gpu_allocated": allocated.get(name, 0),
                "cpu_allocatable_millis": cpu_millis(allocatable.get("cpu")) or 0,
                "memory_allocatable_mib": memory_mib(allocatable.get("memory")) or 0,
                "labels": labels,
                "taints": spec.get("taints") or [],
                "unschedulable": bool(spec.get("unschedulable")),
                "ready": ready,
                "conditions": [
                    {k: c.get(k, "") for k in ("type", "status", "reason", "message")}
                    for c in conditions
                ],
                "last_seen_at": now,
            }
            node = existing.get(name)
            if node is None:
                new.append(Node(cluster=cluster, name=name, **values))
            else:
                for key, value in values.items():
                    setattr(node, key, value)
                updated.append(node)
            result.nodes += 1
            result.unpooled += pool is None
        Node.objects.bulk_create(new)
        Node.objects.bulk_update(updated, fields=list(SYNCED_NODE_FIELDS), batch_size=500)
        result.created = len(new)
        vanished = [n.pk for name, n in existing.items() if name not in seen]
        if vanished:
            result.removed = Node.objects.filter(pk__in=vanished).delete()[0]
        for pool in pools:
            mode = _sharing(sharing[pool.pk]) if pool.pk in sharing else None
            if mode and mode != (pool.sharing, pool.mig_profile, pool.mig_strategy):
                NodePool.objects.filter(pk=pool.pk).update(
                    sharing=mode[0], mig_profile=mode[1], mig_strategy=mode[2]
                )
                transaction.on_commit(
                    lambda pk=pool.pk: pool_saved.send(sender=NodePool, pool_id=pk)
                )
                logger.info("pool %s: sharing read from its nodes: %s %s %s", pool.name, *mode)
        Cluster.objects.filter(pk=cluster.pk).update(last_sync_at=now, last_sync_error="")
    cluster.last_sync_at, cluster.last_sync_error = now, ""
    logger.info(
        "inventory sync of %s: %d nodes (%d new, %d removed, %d in no pool)",
        cluster.name,
        result.nodes,
        result.created,
        result.removed,
        result.unpooled,
    )
    return result
