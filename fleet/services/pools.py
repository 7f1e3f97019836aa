"""Node pools: a label selector, taints and the tolerations jobs need, placement policy."""

from __future__ import annotations

import re

from django.core.exceptions import ValidationError
from django.db import transaction
from django.dispatch import Signal

from fleet.models import Cluster, GpuModel, NodePool
from fleet.permissions import require_platform_admin as _require_admin

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
    "cpu_per_gpu_millis",
    "memory_per_gpu_mib",
)


# What Kueue's ResourceFlavor accepts (spec.nodeLabels maxProperties, spec.nodeTaints and
# spec.tolerations maxItems in its CRD): a pool beyond these would be accepted here and its
# flavor then refused by the API server.
FLAVOR_MAX_LABELS = 8
FLAVOR_MAX_TAINTS = 8
FLAVOR_MAX_TOLERATIONS = 8


def _validate_selector(selector) -> list[str]:
    if not isinstance(selector, dict):
        return ['Give the node labels as an object, e.g. {"accelerator": "nvidia-a100"}.']
    if not selector:
        return ["Give at least one node label; a pool that selects every node is not a pool."]
    if len(selector) > FLAVOR_MAX_LABELS:
        return [
            f"At most {FLAVOR_MAX_LABELS} node labels ({len(selector)} given): Kueue's "
            "ResourceFlavor takes no more."
        ]
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
    if len(taints) > FLAVOR_MAX_TAINTS:
        return [f"At most {FLAVOR_MAX_TAINTS} taints: Kueue's ResourceFlavor takes no more."]
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
    if len(tolerations) > FLAVOR_MAX_TOLERATIONS:
        return [
            f"At most {FLAVOR_MAX_TOLERATIONS} tolerations: Kueue's ResourceFlavor takes no more."
        ]
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
    cpu_per_gpu_millis: int | None = None,
    memory_per_gpu_mib: int | None = None,
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
        cpu_per_gpu_millis=cpu_per_gpu_millis or None,
        memory_per_gpu_mib=memory_per_gpu_mib or None,
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
