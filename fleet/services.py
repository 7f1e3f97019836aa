"""Writes for fleet: cluster registration, node pools, and inventory sync from the cluster."""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import ProtectedError
from django.dispatch import Signal
from django.utils import timezone

from fleet import kube
from fleet.models import Cluster, GpuModel, Node, NodePool
from fleet.permissions import is_platform_admin

logger = logging.getLogger(__name__)

GPU_RESOURCE = "nvidia.com/gpu"
PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
TOLERATION_OPERATORS = ("Equal", "Exists")
LABEL_KEY_RE = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$")

# Sent (after commit) when a pool is created or changed, with pool_id: the queues app listens to
# re-render the pool's ResourceFlavor. fleet cannot import queues, so it announces instead.
pool_saved = Signal()


def _require_admin(actor) -> None:
    if not is_platform_admin(actor):
        raise PermissionDenied("Only platform admins can manage clusters and node pools.")


# --- clusters ----------------------------------------------------------------------------------

CLUSTER_FIELDS = (
    "name",
    "kubeconfig_path",
    "context",
    "in_cluster",
    "scheduler",
    "kueue_api_version",
    "is_default",
)


def _validate_connection(cluster: Cluster) -> None:
    errors = {}
    if cluster.in_cluster:
        if cluster.kubeconfig_path or cluster.context:
            errors["in_cluster"] = "In-cluster clusters take no kubeconfig path or context."
    elif not cluster.kubeconfig_path:
        errors["kubeconfig_path"] = "Give the kubeconfig path, or tick in-cluster."
    elif not os.path.isabs(cluster.kubeconfig_path):
        errors["kubeconfig_path"] = "Use an absolute path, e.g. /etc/quartermaster/kubeconfig."
    elif not os.path.isfile(cluster.kubeconfig_path):
        errors["kubeconfig_path"] = f"No file at {cluster.kubeconfig_path} on the portal server."
    elif cluster.context:
        contexts = kube.kubeconfig_contexts(cluster.kubeconfig_path)
        if cluster.context not in contexts:
            known = ", ".join(contexts) or "none found"
            errors["context"] = f"The kubeconfig has no context {cluster.context!r} ({known})."
    if errors:
        raise ValidationError(errors)


def _save_cluster(cluster: Cluster) -> Cluster:
    _validate_connection(cluster)
    # is_default is left out: the transaction below moves the default flag.
    cluster.full_clean(exclude=["last_sync_at", "last_sync_error", "is_default"])
    with transaction.atomic():
        if cluster.is_default:
            Cluster.objects.exclude(pk=cluster.pk).filter(is_default=True).update(is_default=False)
        cluster.save()
        transaction.on_commit(lambda: cluster_sync_enqueue(cluster_id=cluster.pk))
    kube.clear_client_cache()
    return cluster


def cluster_register(
    *,
    actor,
    name: str,
    kubeconfig_path: str = "",
    context: str = "",
    in_cluster: bool = False,
    scheduler: str = Cluster.Scheduler.KUEUE,
    kueue_api_version: str = Cluster.KueueApiVersion.V1BETA2,
    is_default: bool = False,
) -> Cluster:
    """Register a cluster (platform admins); an inventory sync follows after commit."""
    _require_admin(actor)
    cluster = Cluster(
        name=(name or "").strip(),
        kubeconfig_path=(kubeconfig_path or "").strip(),
        context=(context or "").strip(),
        in_cluster=bool(in_cluster),
        scheduler=scheduler,
        kueue_api_version=kueue_api_version,
        is_default=bool(is_default) or not Cluster.objects.exists(),
    )
    return _save_cluster(cluster)


def cluster_update(*, actor, cluster: Cluster, **changes) -> Cluster:
    """Change how a cluster is reached or scheduled (platform admins)."""
    _require_admin(actor)
    unknown = set(changes) - set(CLUSTER_FIELDS)
    if unknown:
        raise ValidationError(f"Unknown cluster fields: {', '.join(sorted(unknown))}.")
    for name, value in changes.items():
        setattr(cluster, name, value.strip() if isinstance(value, str) else value)
    return _save_cluster(cluster)


def cluster_delete(*, actor, cluster: Cluster) -> None:
    """Forget a cluster (platform admins); refused while pools or other records use it."""
    _require_admin(actor)
    pools = cluster.pools.count()
    if pools:
        raise ValidationError(
            f"The cluster still has {pools} node pool(s): delete or move them first."
        )
    try:
        with transaction.atomic():
            cluster.delete()
    except ProtectedError as exc:
        raise ValidationError(
            "Other records (jobs, quotas, usage) still refer to this cluster; it stays."
        ) from exc
    kube.clear_client_cache()


def cluster_sync_request(*, actor, cluster: Cluster) -> None:
    """Ask for an inventory sync now (platform admins); the worker talks to the cluster."""
    _require_admin(actor)
    transaction.on_commit(lambda: cluster_sync_enqueue(cluster_id=cluster.pk))


def cluster_sync_enqueue(*, cluster_id: int) -> None:
    """Queue the inventory sync task (call after commit)."""
    from fleet.tasks import sync_inventory

    sync_inventory.delay(cluster_id)


# --- node pools --------------------------------------------------------------------------------

POOL_FIELDS = (
    "name",
    "gpu_model",
    "node_selector",
    "taints",
    "tolerations",
    "capacity_type",
    "interconnect",
    "sharing",
    "allow_oversubscription",
)


def _validate_selector(selector) -> list[str]:
    if not isinstance(selector, dict):
        return ['Give the node labels as an object, e.g. {"accelerator": "nvidia-a100"}.']
    if not selector:
        return ["Give at least one node label; a pool that selects every node is not a pool."]
    errors = []
    for key, value in selector.items():
        if not isinstance(key, str) or not LABEL_KEY_RE.match(key) or len(key) > 316:
            errors.append(f"{key!r} is not a valid label key.")
        if not isinstance(value, str):
            errors.append(f"The value of {key!r} must be a string (quote numbers and booleans).")
        elif not LABEL_VALUE_RE.match(value):
            errors.append(f"{value!r} is not a valid label value (63 characters at most).")
    return errors


def _validate_taints(taints) -> list[str]:
    if not isinstance(taints, list):
        return ['Give taints as a list, e.g. [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}].']
    errors = []
    for i, taint in enumerate(taints):
        if not isinstance(taint, dict):
            errors.append(f"Taint {i + 1} must be an object with key, value and effect.")
            continue
        extra = set(taint) - {"key", "value", "effect"}
        key, value, effect = taint.get("key"), taint.get("value", ""), taint.get("effect")
        if extra:
            errors.append(f"Taint {i + 1} has unknown fields: {', '.join(sorted(extra))}.")
        if not isinstance(key, str) or not LABEL_KEY_RE.match(key):
            errors.append(f"Taint {i + 1} needs a valid key.")
        if not isinstance(value, str) or not LABEL_VALUE_RE.match(value):
            errors.append(f"Taint {i + 1} has an invalid value.")
        if effect not in TAINT_EFFECTS:
            errors.append(f"Taint {i + 1} needs an effect: one of {', '.join(TAINT_EFFECTS)}.")
    return errors


def _validate_tolerations(tolerations) -> list[str]:
    if not isinstance(tolerations, list):
        return ["Give tolerations as a list of objects."]
    errors = []
    allowed = {"key", "operator", "value", "effect", "tolerationSeconds"}
    for i, tol in enumerate(tolerations):
        if not isinstance(tol, dict):
            errors.append(f"Toleration {i + 1} must be an object.")
            continue
        if set(tol) - allowed:
            errors.append(
                f"Toleration {i + 1} has unknown fields: {', '.join(sorted(set(tol) - allowed))}."
            )
        operator = tol.get("operator", "Equal")
        if operator not in TOLERATION_OPERATORS:
            errors.append(f"Toleration {i + 1}: operator must be Equal or Exists.")
        if operator == "Exists" and tol.get("value"):
            errors.append(f"Toleration {i + 1}: operator Exists takes no value.")
        if tol.get("effect") not in (None, "", *TAINT_EFFECTS):
            errors.append(f"Toleration {i + 1}: effect must be one of {', '.join(TAINT_EFFECTS)}.")
        if not isinstance(tol.get("key", ""), str) or not isinstance(tol.get("value", ""), str):
            errors.append(f"Toleration {i + 1}: key and value must be strings.")
    return errors


def tolerations_for(taints: list[dict]) -> list[dict]:
    """The tolerations a pod needs to land on nodes with these taints."""
    out = []
    for taint in taints:
        tol = {"key": taint["key"], "effect": taint["effect"]}
        if taint.get("value"):
            tol.update(operator="Equal", value=taint["value"])
        else:
            tol["operator"] = "Exists"
        out.append(tol)
    return out


def _save_pool(pool: NodePool, *, tolerations_given: bool) -> NodePool:
    errors = {}
    for name, check in (
        ("node_selector", _validate_selector),
        ("taints", _validate_taints),
        ("tolerations", _validate_tolerations),
    ):
        problems = check(getattr(pool, name))
        if problems:
            errors[name] = problems
    duplicate = NodePool.objects.filter(cluster_id=pool.cluster_id, name=pool.name)
    if pool.cluster_id and duplicate.exclude(pk=pool.pk).exists():
        errors["name"] = [f"The cluster already has a pool named {pool.name!r}."]
    if errors:
        raise ValidationError(errors)
    if not tolerations_given or not pool.tolerations:
        pool.tolerations = tolerations_for(pool.taints)
    pool.full_clean()
    with transaction.atomic():
        pool.save()
        pool_id = pool.pk
        transaction.on_commit(lambda: pool_saved.send(sender=NodePool, pool_id=pool_id))
    return pool


def pool_create(
    *,
    actor,
    cluster: Cluster,
    name: str,
    gpu_model: GpuModel,
    node_selector: dict,
    taints: list | None = None,
    tolerations: list | None = None,
    capacity_type: str = NodePool.CapacityType.ON_DEMAND,
    interconnect: str = NodePool.Interconnect.PCIE,
    sharing: str = NodePool.Sharing.NONE,
    allow_oversubscription: bool = False,
) -> NodePool:
    """Define a node pool (platform admins); tolerations follow from taints unless given."""
    _require_admin(actor)
    pool = NodePool(
        cluster=cluster,
        name=(name or "").strip(),
        gpu_model=gpu_model,
        node_selector=node_selector if node_selector is not None else {},
        taints=taints if taints is not None else [],
        tolerations=tolerations if tolerations is not None else [],
        capacity_type=capacity_type,
        interconnect=interconnect,
        sharing=sharing,
        allow_oversubscription=bool(allow_oversubscription),
    )
    return _save_pool(pool, tolerations_given=tolerations is not None)


def pool_update(*, actor, pool: NodePool, **changes) -> NodePool:
    """Change a node pool (platform admins); nodes are re-matched at the next sync."""
    _require_admin(actor)
    unknown = set(changes) - set(POOL_FIELDS)
    if unknown:
        raise ValidationError(f"Unknown pool fields: {', '.join(sorted(unknown))}.")
    for name, value in changes.items():
        setattr(pool, name, value.strip() if isinstance(value, str) else value)
    return _save_pool(pool, tolerations_given="tolerations" in changes)


# --- inventory sync ----------------------------------------------------------------------------


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
        return _gpu_count(requests.get(GPU_RESOURCE, limits.get(GPU_RESOURCE, 0)))

    main = sum(container_gpus(c) for c in spec.get("containers") or [])
    init = max((container_gpus(c) for c in spec.get("initContainers") or []), default=0)
    return max(main, init)


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
        for raw in raw_nodes:
            meta, spec, status = (raw.get(k) or {} for k in ("metadata", "spec", "status"))
            name = meta["name"]
            seen.add(name)
            labels = meta.get("labels") or {}
            conditions = status.get("conditions") or []
            ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
            pool = _match_pool(labels, pools)
            model = _gpu_model_for(labels.get(PRODUCT_LABEL, ""), models, result, labels)
            values = {
                "pool_id": pool.pk if pool else None,
                "gpu_model_id": model.pk if model else None,
                "gpu_capacity": _gpu_count((status.get("capacity") or {}).get(GPU_RESOURCE)),
                "gpu_allocatable": _gpu_count((status.get("allocatable") or {}).get(GPU_RESOURCE)),
                "gpu_allocated": allocated.get(name, 0),
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
