"""Node pools: a label selector, taints and the tolerations jobs need, placement policy."""

from __future__ import annotations

import re

from django.core.exceptions import ValidationError
from django.db import transaction
from django.dispatch import Signal

from fleet.audit import changes as changed_fields
from fleet.audit import fleet_audit, snapshot
from fleet.models import Cluster, GpuModel, NodePool
from fleet.models.inventory import SPOT_TAINT
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
    "topology_levels",
    "mig_profile",
)


# What Kueue's ResourceFlavor accepts (spec.nodeLabels maxProperties, spec.nodeTaints and
# spec.tolerations maxItems in its CRD): a pool beyond these would be accepted here and its
# flavor then refused by the API server.
FLAVOR_MAX_LABELS = 8
FLAVOR_MAX_TAINTS = 8
FLAVOR_MAX_TOLERATIONS = 8
# Kueue's Topology: 1 to 16 levels (spec.levels), the hostname only as the narrowest.
TOPOLOGY_MAX_LEVELS = 16
HOSTNAME_LABEL = "kubernetes.io/hostname"
LEVEL_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,30}[a-z0-9])?$")
# A MIG profile as the device plugin names its resource (nvidia.com/mig-<profile>): 1g.10gb,
# 3g.40gb, 1g.10gb+me, 1c.2g.20gb.
MIG_PROFILE_RE = re.compile(r"^[0-9]+[cg](\.[0-9]+[cg])?\.[0-9]+gb(\+[a-z]+)?$")
MIG_COUNT_LABEL = re.compile(r"^nvidia\.com/mig-(.+)\.count$")
# Kueue refuses changes to these once a flavor has a topology (the Topology's levels, and the
# flavor's node labels, tolerations and topologyName).
TOPOLOGY_FIXED = ("topology_levels", "node_selector", "tolerations")


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
        key, value = tol.get("key", ""), tol.get("value", "")
        if not isinstance(key, str) or not isinstance(value, str):
            errors.append(f"Toleration {i + 1}: key and value must be strings.")
            continue
        # What Kubernetes takes for a taint's key and value (and what text can be stored).
        if key and not LABEL_KEY_RE.fullmatch(key):
            errors.append(f"Toleration {i + 1}: {key[:63]!r} is not a valid taint key.")
        if value and not LABEL_VALUE_RE.fullmatch(value):
            errors.append(f"Toleration {i + 1}: {value[:63]!r} is not a valid taint value.")
        seconds = tol.get("tolerationSeconds")
        if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, int)):
            errors.append(f"Toleration {i + 1}: tolerationSeconds must be a whole number.")
    return errors


def _validate_topology(levels) -> list[str]:
    example = '[{"name": "rack", "node_label": "cloud.provider.com/topology-rack"}]'
    if not isinstance(levels, list):
        return [f"Give the topology levels as a list, widest first, e.g. {example}."]
    if len(levels) > TOPOLOGY_MAX_LEVELS:
        return [f"At most {TOPOLOGY_MAX_LEVELS} levels: Kueue's Topology takes no more."]
    errors, names, labels = [], set(), set()
    for i, level in enumerate(levels, 1):
        if not isinstance(level, dict) or set(level) != {"name", "node_label"}:
            errors.append(f"Level {i} must be an object with name and node_label, e.g. {example}.")
            continue
        name, label = level["name"], level["node_label"]
        if not isinstance(name, str) or not LEVEL_NAME_RE.match(name):
            errors.append(
                f"Level {i} needs a short name (lower-case letters, digits and '-', up to 32), "
                "e.g. rack."
            )
        elif name in names:
            errors.append(f"The level name {name!r} is given twice.")
        if not isinstance(label, str) or len(label) > 316 or not LABEL_KEY_RE.match(label):
            errors.append(f"Level {i}: {label!r} is not a valid node label key.")
        elif label in labels:
            errors.append(f"The node label {label!r} is given twice.")
        names.add(name if isinstance(name, str) else None)
        labels.add(label if isinstance(label, str) else None)
    if any(isinstance(lv, dict) and lv.get("node_label") == HOSTNAME_LABEL for lv in levels[:-1]):
        errors.append(f"{HOSTNAME_LABEL} can only be the last (narrowest) level.")
    return errors


def _validate_mig_profile(pool: NodePool) -> list[str]:
    """A MIG profile named for the pool must be one that every node of the pool offers (the
    nodes of the last inventory sync; any well-formed name before the first)."""
    profile = pool.mig_profile
    if not profile:
        return []
    if not isinstance(profile, str) or len(profile) > 32 or not MIG_PROFILE_RE.match(profile):
        return [f"{str(profile)[:40]!r} is not a MIG profile; name one such as 1g.10gb or 3g.40gb."]
    offered = None
    for labels in pool.nodes.values_list("labels", flat=True) if pool.pk else ():
        node = {m.group(1) for key in labels or {} if (m := MIG_COUNT_LABEL.match(key))}
        offered = node if offered is None else offered & node
    if offered is not None and profile not in offered:
        names = ", ".join(sorted(offered)) or "none (its nodes are not partitioned alike)"
        return [f"Not every node of the pool offers {profile}; the profiles all of them offer: "
                f"{names}."]  # fmt: skip
    return []


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


def _save_pool(
    pool: NodePool,
    *,
    actor,
    tolerations_given: bool,
    before: dict | None = None,
    was: dict | None = None,
) -> NodePool:
    """Validate and save, audited as done by `actor`; `before`: the TOPOLOGY_FIXED values of
    the pool as it was, `was`: all its fields as it was (none: a new pool)."""
    errors = {}
    for name, check in (
        ("node_selector", _validate_selector),
        ("taints", _validate_taints),
        ("tolerations", _validate_tolerations),
        ("topology_levels", _validate_topology),
        ("mig_profile", lambda _: _validate_mig_profile(pool)),
    ):
        problems = check(getattr(pool, name))
        if problems:
            errors[name] = problems
    duplicate = NodePool.objects.filter(cluster_id=pool.cluster_id, name=pool.name)
    if pool.cluster_id and duplicate.exclude(pk=pool.pk).exists():
        errors["name"] = [f"The cluster already has a pool named {pool.name!r}."]
    if pool.topology_levels and pool.cluster_id and pool.cluster.scheduler != "kueue":
        errors["topology_levels"] = [
            f"Topology-aware placement is Kueue's; cluster {pool.cluster.name} is scheduled by "
            f"{pool.cluster.get_scheduler_display()}."
        ]
    if errors:
        raise ValidationError(errors)
    # A spot pool carries the spot taint (and a pool that is no longer spot drops it).
    others = [t for t in pool.taints if t.get("key") != SPOT_TAINT["key"]]
    spot = pool.capacity_type == NodePool.CapacityType.SPOT
    pool.taints = [*others, dict(SPOT_TAINT)] if spot else others
    if not tolerations_given or not pool.tolerations:
        # Not the spot taint: only interruptible jobs tolerate it (they add it themselves).
        pool.tolerations = tolerations_for(
            [t for t in pool.taints if t.get("key") != SPOT_TAINT["key"]]
        )
    if before and before["topology_levels"]:
        for name in TOPOLOGY_FIXED:
            if getattr(pool, name) != before[name]:
                field = "taints" if name == "tolerations" and not tolerations_given else name
                errors[field] = [
                    "Kueue keeps a topology-aware pool's levels, node labels and tolerations "
                    "fixed once its flavor exists: define a new pool for a different layout."
                ]
        if errors:
            raise ValidationError(errors)
    pool.full_clean()
    with transaction.atomic():
        pool.save()
        now = snapshot(pool, ["cluster", *POOL_FIELDS])
        if was is None:
            fleet_audit(actor=actor, verb="pool.create", obj=pool, after=now,
                        message=f"Pool {pool.name} defined on cluster {pool.cluster}.")  # fmt: skip
        elif now != was:
            old, new = changed_fields(was, now)
            fleet_audit(actor=actor, verb="pool.update", obj=pool, before=old, after=new,
                        message=f"Pool {pool.name} changed: {', '.join(new)}.")  # fmt: skip
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
    topology_levels: list | None = None,
    mig_profile: str = "",
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
        topology_levels=topology_levels if topology_levels is not None else [],
        mig_profile=(mig_profile or "").strip(),
    )
    return _save_pool(pool, actor=actor, tolerations_given=tolerations is not None)


def pool_update(*, actor, pool: NodePool, **changes) -> NodePool:
    """Change a node pool (platform admins); nodes are re-matched at the next sync."""
    _require_admin(actor)
    unknown = set(changes) - set(POOL_FIELDS)
    if unknown:
        raise ValidationError(f"Unknown pool fields: {', '.join(sorted(unknown))}.")
    before = {name: getattr(pool, name) for name in TOPOLOGY_FIXED}
    was = snapshot(pool, ["cluster", *POOL_FIELDS])
    for name, value in changes.items():
        setattr(pool, name, value.strip() if isinstance(value, str) else value)
    return _save_pool(pool, actor=actor, tolerations_given="tolerations" in changes,
                      before=before, was=was)  # fmt: skip
