"""Inventory sync: nodes and GPU pods from the cluster into Node rows, matched to pools.

A node's GPUs are counted in the resource they are scheduled as: `nvidia.com/gpu`; on a MIG
node (GPU feature discovery's `nvidia.com/mig.strategy: mixed`) the instances of its pool's MIG
profile (`nvidia.com/mig-<profile>`; a node may offer several profiles: the pool counts one);
on a time-sliced node whose device plugin renames the shares (`renameByDefault`),
`nvidia.com/gpu.shared`. A pool's sharing mode follows its nodes: MIG with a profile every node
offers, time-slicing when they are labelled `nvidia.com/gpu.sharing-strategy: time-slicing`
(renamed when they advertise `nvidia.com/gpu.shared`), else whole GPUs; a change is announced
(`pool_saved`) so that the pool's queues are rendered in its unit."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from django.db import transaction
from django.utils import timezone

from fleet import kube
from fleet.models import Cluster, GpuModel, Node, NodePool
from fleet.models.inventory import (
    GPU_RESOURCE,
    MIG_RESOURCE_PREFIX,
    SHARED_GPU_RESOURCE,
    is_gpu_resource,
)
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


def _pod_gpus(pod: dict) -> dict[str, int]:
    """GPU resource -> units a pod holds: the sum over containers, or the largest init
    container's if larger."""
    spec = pod.get("spec") or {}

    def container_gpus(container) -> dict[str, int]:
        resources = container.get("resources") or {}
        limits = resources.get("limits") or {}
        requests = resources.get("requests") or {}
        return {
            name: _gpu_count(requests.get(name, limits.get(name, 0)))
            for name in {*requests, *limits}
            if is_gpu_resource(name)
        }

    held: dict[str, int] = {}
    for container in spec.get("containers") or []:
        for name, count in container_gpus(container).items():
            held[name] = held.get(name, 0) + count
    for container in spec.get("initContainers") or []:
        for name, count in container_gpus(container).items():
            held[name] = max(held.get(name, 0), count)
    return {name: count for name, count in held.items() if count}


@dataclass(frozen=True)
class NodeGpus:
    """What a node's labels and capacity say about its GPUs."""

    mig_profiles: dict[str, int]  # MIG profile -> instances (mixed strategy)
    single_profile: str  # the MIG profile under the single strategy (instances: nvidia.com/gpu)
    sliced: bool  # time-sliced (GPU feature discovery's sharing strategy)
    renamed: bool  # time-sliced shares advertised as nvidia.com/gpu.shared (renameByDefault)

    @classmethod
    def read(cls, labels: dict, capacity: dict) -> NodeGpus:
        single = ""
        if labels.get("nvidia.com/mig.strategy") == "single":
            # Single strategy: instances are nvidia.com/gpu; the product names the profile.
            _, sep, profile = labels.get(PRODUCT_LABEL, "").partition("-MIG-")
            single = profile if sep else ""
        profiles = {
            name.removeprefix(MIG_RESOURCE_PREFIX): _gpu_count(value)
            for name, value in capacity.items()
            if name.startswith(MIG_RESOURCE_PREFIX) and _gpu_count(value)
        }
        if labels.get("nvidia.com/mig.strategy") != "mixed":
            profiles = {}
        return cls(
            mig_profiles=profiles,
            single_profile=single,
            sliced=labels.get("nvidia.com/gpu.sharing-strategy") == "time-slicing",
            renamed=_gpu_count(capacity.get(SHARED_GPU_RESOURCE)) > 0,
        )

    def resource(self, mig_profile: str = "") -> str:
        """The resource its GPUs are counted in: the MIG profile's (the given one if the node
        offers it, else the one it has most instances of), renamed shares, or nvidia.com/gpu."""
        if self.mig_profiles:
            if mig_profile not in self.mig_profiles:
                mig_profile = _most_instances([self.mig_profiles])
            return f"{MIG_RESOURCE_PREFIX}{mig_profile}"
        return SHARED_GPU_RESOURCE if self.renamed else GPU_RESOURCE


def _most_instances(offers: list[dict[str, int]]) -> str:
    """The MIG profile with the most instances over the nodes (ties: by name)."""
    totals: dict[str, int] = {}
    for offer in offers:
        for profile, count in offer.items():
            totals[profile] = totals.get(profile, 0) + count
    return min(totals, key=lambda profile: (-totals[profile], profile))


def _sharing(nodes: list[NodeGpus], current: str) -> tuple[str, str, str, bool]:
    """A pool's (sharing mode, MIG profile, MIG strategy, renamed shares) from its nodes. MIG
    when every node offers one profile in common (the pool's current profile if every node
    offers it, else the common one with the most instances), or every node has the same
    single-strategy profile; time-slicing when any node is time-sliced; else whole GPUs."""
    if all(n.mig_profiles for n in nodes):
        common = set.intersection(*(set(n.mig_profiles) for n in nodes))
        if common:
            profile = (
                current
                if current in common
                else _most_instances(
                    [{p: c for p, c in n.mig_profiles.items() if p in common} for n in nodes]
                )
            )
            return NodePool.Sharing.MIG, profile, "mixed", False
    singles = {n.single_profile for n in nodes}
    if len(singles) == 1 and "" not in singles:
        return NodePool.Sharing.MIG, singles.pop(), "single", False
    if any(n.sliced for n in nodes):
        return NodePool.Sharing.TIME_SLICING, "", "", any(n.renamed for n in nodes)
    return NodePool.Sharing.NONE, "", "", False


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

    allocated: dict[str, dict[str, int]] = {}
    for pod in raw_pods:
        node_name = (pod.get("spec") or {}).get("nodeName")
        if not node_name:
            continue
        held = allocated.setdefault(node_name, {})
        for resource, count in _pod_gpus(pod).items():
            held[resource] = held.get(resource, 0) + count

    now = timezone.now()
    with transaction.atomic():
        # One sync per cluster at a time; a second waits and then writes fresher data.
        Cluster.objects.select_for_update().get(pk=cluster.pk)
        pools = list(NodePool.objects.filter(cluster=cluster))
        models = list(GpuModel.objects.all())
        existing = {n.name: n for n in Node.objects.filter(cluster=cluster)}
        seen, rows = set(), []
        by_pool: dict[int, list[NodeGpus]] = {}
        for raw in raw_nodes:
            meta, spec, status = (raw.get(k) or {} for k in ("metadata", "spec", "status"))
            name = meta["name"]
            seen.add(name)
            labels = meta.get("labels") or {}
            conditions = status.get("conditions") or []
            ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
            pool = _match_pool(labels, pools)
            allocatable = status.get("allocatable") or {}
            gpus = NodeGpus.read(labels, status.get("capacity") or {})
            if pool is not None:
                by_pool.setdefault(pool.pk, []).append(gpus)
            model = _gpu_model_for(labels.get(PRODUCT_LABEL, ""), models, result, labels)
            values = {
                "pool_id": pool.pk if pool else None,
                "gpu_model_id": model.pk if model else None,
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
            rows.append((name, pool, gpus, raw, values))
            result.nodes += 1
            result.unpooled += pool is None
        # Each pool's sharing from all its nodes, then every node counted in its pool's unit.
        modes = {}
        for pool in pools:
            if pool.pk not in by_pool:
                continue
            mode = modes[pool.pk] = _sharing(by_pool[pool.pk], pool.mig_profile)
            current = (pool.sharing, pool.mig_profile, pool.mig_strategy, pool.shares_renamed)
            if mode != current:
                NodePool.objects.filter(pk=pool.pk).update(
                    sharing=mode[0], mig_profile=mode[1], mig_strategy=mode[2],
                    shares_renamed=mode[3],
                )  # fmt: skip
                transaction.on_commit(
                    lambda pk=pool.pk: pool_saved.send(sender=NodePool, pool_id=pk)
                )
                logger.info("pool %s: sharing read from its nodes: %s %s %s %s", pool.name, *mode)
        new, updated = [], []
        for name, pool, gpus, raw, values in rows:
            profile = modes[pool.pk][1] if pool is not None else ""
            resource = gpus.resource(profile)
            status = raw.get("status") or {}
            values["gpu_capacity"] = _gpu_count((status.get("capacity") or {}).get(resource))
            values["gpu_allocatable"] = _gpu_count((status.get("allocatable") or {}).get(resource))
            values["gpu_allocated"] = allocated.get(name, {}).get(resource, 0)
            node = existing.get(name)
            if node is None:
                new.append(Node(cluster=cluster, name=name, **values))
            else:
                for key, value in values.items():
                    setattr(node, key, value)
                updated.append(node)
        Node.objects.bulk_create(new)
        Node.objects.bulk_update(updated, fields=list(SYNCED_NODE_FIELDS), batch_size=500)
        result.created = len(new)
        vanished = [n.pk for name, n in existing.items() if name not in seen]
        if vanished:
            result.removed = Node.objects.filter(pk__in=vanished).delete()[0]
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
