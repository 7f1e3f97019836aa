"""Render the quota objects (flavors, cohorts, queues, tiers): pure functions, model → dict.

Names (deterministic, DNS-1123):
- pool → ResourceFlavor `<pool.name>` (`flavor_name`)
- department → Cohort `qm-<department.slug>` (Kueue) or parent Queue of that name (Volcano)
- the organisation → Cohort `qm-organisation` (Kueue), the parent of the Cohorts of the
  departments that share with it (`ORGANISATION_COHORT`); rendered while any does
- team → Namespace `<team.namespace>`, ClusterQueue `qm-<team.slug>` (`cluster_queue_name`),
  LocalQueue `<team.slug>` in the team's namespace (`local_queue_name`); Volcano Queue
  `qm-<team.slug>`
- member of a team that shares its queue fairly among members (Kueue's admission fair
  sharing) → LocalQueue `<team.slug>-<username>-<user id>` (`member_queue_name`)
- team × pool (Volcano) → leaf Queue `qm-<team.slug>-<pool.name>` (`volcano_pool_queue_name`)
- tier → WorkloadPriorityClass / PriorityClass `<tier.name>`

Volcano has no declarative "closed" switch on a Queue: `status.state` is changed by Volcano's
controller when it processes a `bus.volcano.sh` Command (what `vcctl queue operate --action close`
creates). A held team's Queue is therefore rendered with `capability: {nvidia.com/gpu: 0}`, which
stops any new GPU job from being enqueued while running ones finish, and the reason is kept in the
`quartermaster.dev/hold-reason` annotation.

Volcano queues have no flavors, so pool limits are enforced by the queue hierarchy: under the
team's Queue (the team's whole quota, summed over the pools) each pool gets a leaf Queue with
that pool's quota: `deserved` = nominal, `capability` = nominal + borrowing limit (omitted, i.e.
unlimited, without a borrowing limit), `guarantee` = nominal − lending limit (the part never
lent). A job goes to the leaf Queue of its pool (and is pinned to the pool's nodes), so Volcano
admits it only while both its pool's and its team's Queue have room.

Neither Kueue nor Kubernetes priority classes have a "not preemptible" switch: a tier is protected
by its value (Kueue and the scheduler only preempt lower priorities), and the description says so.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterable
from decimal import Decimal

from fleet.models.inventory import SPOT_TAINT
from fleet.quantities import DEFAULT_WORKER_SIZE, WorkerSize, cpu_text, memory_text
from fleet.validators import to_dns1123_label
from queues.manifests import podsecurity
from queues.manifests.common import (
    ANNOTATION_HOLD,
    GPU_RESOURCE,
    LABEL_DEPARTMENT,
    LABEL_MANAGED_BY,
    LABEL_MEMBER,
    LABEL_POOL,
    LABEL_TEAM,
    LABEL_TIER,
    MANAGED_BY,
)

KUEUE_GROUP = "kueue.x-k8s.io"
ADMISSION_FAIR_SHARING = "UsageBasedAdmissionFairSharing"  # a ClusterQueue's admissionMode
# What a team's ClusterQueue covers, in the order its flavors list them.
VOLCANO_QUEUE_API = "scheduling.volcano.sh/v1beta1"
PRIORITY_CLASS_API = "scheduling.k8s.io/v1"

OWNER_POOL = "pool"
OWNER_DEPARTMENT = "department"
OWNER_TEAM = "team"
OWNER_TIER = "tier"
OWNER_ORGANISATION = "organisation"  # owner id 0: there is one
ORGANISATION_COHORT = "qm-organisation"


# -- names -------------------------------------------------------------------------------------


def flavor_name(pool) -> str:
    """The ResourceFlavor name of a pool (= the pool's name)."""
    return pool.name


def cohort_name(department) -> str:
    """The Kueue Cohort (or Volcano parent Queue) name of a department."""
    return f"qm-{department.slug}"


def cluster_queue_name(team) -> str:
    """The ClusterQueue (or Volcano Queue) name of a team."""
    return f"qm-{team.slug}"


def local_queue_name(team) -> str:
    """The LocalQueue name in the team's namespace; jobs set `kueue.x-k8s.io/queue-name` to it."""
    return team.slug


def member_queue_name(team, user) -> str:
    """A member's own LocalQueue in the team's namespace (member fair sharing): readable, and
    unique by the user's id; at most 63 characters, as the queue-name label allows."""
    suffix = f"-{user.pk}"
    base = to_dns1123_label(f"{team.slug}-{user.username}", max_length=63 - len(suffix))
    return f"{base}{suffix}"


def priority_class_name(tier) -> str:
    """The WorkloadPriorityClass / PriorityClass name of a tier (= the tier's name)."""
    return tier.name


def kueue_api_version(cluster) -> str:
    return f"{KUEUE_GROUP}/{getattr(cluster, 'kueue_api_version', '') or 'v1beta2'}"


# -- helpers -----------------------------------------------------------------------------------


def _metadata(name: str, labels: dict, namespace: str | None = None, annotations=None) -> dict:
    meta: dict = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    meta["labels"] = {LABEL_MANAGED_BY: MANAGED_BY, **labels}
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


def _team_labels(team) -> dict:
    return {LABEL_TEAM: team.slug, LABEL_DEPARTMENT: team.department.slug}


def _tolerations_for(taints: list[dict]) -> list[dict]:
    # A pool without explicit tolerations needs the ones that tolerate its own taints.
    tolerations = []
    for taint in taints:
        tol = {"key": taint["key"], "effect": taint.get("effect", "NoSchedule")}
        if taint.get("value"):
            tol.update(operator="Equal", value=taint["value"])
        else:
            tol["operator"] = "Exists"
        tolerations.append(tol)
    return tolerations


def _taint(taint: dict) -> dict:
    out = {"key": taint["key"], "effect": taint.get("effect", "NoSchedule")}
    if taint.get("value"):
        out["value"] = taint["value"]
    return out


def _toleration(tol: dict) -> dict:
    keys = ("key", "operator", "value", "effect", "tolerationSeconds")
    return {k: tol[k] for k in keys if tol.get(k) not in (None, "")}


# -- shared ------------------------------------------------------------------------------------


def namespace_manifest(team) -> dict:
    """The team's Namespace, labelled for Pod Security admission (queues.manifests.podsecurity)."""
    labels = {**_team_labels(team), **podsecurity.namespace_labels(team)}
    # Set by the API server anyway; stating it keeps the ClusterQueue's selector self-evident.
    labels["kubernetes.io/metadata.name"] = team.namespace
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": _metadata(team.namespace, labels)}


def volume_manifest(volume) -> dict:
    """A team volume as a PersistentVolumeClaim in the team's namespace (no storageClassName:
    the cluster's default class)."""
    team = volume.team
    spec: dict = {
        "accessModes": [volume.access_mode],
        "resources": {"requests": {"storage": f"{volume.size_gib}Gi"}},
    }
    if volume.storage_class:
        spec["storageClassName"] = volume.storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _metadata(volume.name, _team_labels(team), team.namespace),
        "spec": spec,
    }


# -- Kueue -------------------------------------------------------------------------------------


def resource_flavor_manifest(pool, *, api_version: str = "v1beta2") -> dict:
    """A pool as a Kueue ResourceFlavor: node labels, taints and the tolerations jobs get."""
    spec: dict = {}
    if pool.node_selector:
        spec["nodeLabels"] = {str(k): str(v) for k, v in sorted(pool.node_selector.items())}
    taints = list(pool.taints or [])
    if taints:
        spec["nodeTaints"] = [_taint(t) for t in taints]
    tolerations = [_toleration(t) for t in (pool.tolerations or [])] or _tolerations_for(taints)
    # The spot taint stays untolerated: only interruptible jobs (which tolerate it) fit here.
    tolerations = [t for t in tolerations if t.get("key") != SPOT_TAINT["key"]]
    if tolerations:
        spec["tolerations"] = tolerations
    if pool.topology_levels:
        spec["topologyName"] = flavor_name(pool)
    return {
        "apiVersion": f"{KUEUE_GROUP}/{api_version}",
        "kind": "ResourceFlavor",
        "metadata": _metadata(flavor_name(pool), {LABEL_POOL: pool.name}),
        "spec": spec,
    }


def topology_manifest(pool, *, api_version: str = "v1beta2") -> dict:
    """A pool's topology levels as a Kueue Topology (named like its flavor), widest first."""
    return {
        "apiVersion": f"{KUEUE_GROUP}/{api_version}",
        "kind": "Topology",
        "metadata": _metadata(flavor_name(pool), {LABEL_POOL: pool.name}),
        "spec": {"levels": [{"nodeLabel": lv["node_label"]} for lv in pool.topology_levels]},
    }


def cohort_manifest(department, *, api_version: str = "v1beta2") -> dict:
    """A department as a Kueue Cohort; its teams' ClusterQueues borrow and lend within it, and,
    when it shares with the organisation, through the organisation's Cohort with the teams of
    the other departments that do (weighed by its fair-sharing weight)."""
    spec: dict = {}
    if department.shares_with_organisation:
        spec["parentName"] = ORGANISATION_COHORT
        if department.fair_share_weight != 1:  # 1 is Kueue's default weight
            spec["fairSharing"] = {"weight": fair_share_weight_text(department.fair_share_weight)}
    return {
        "apiVersion": f"{KUEUE_GROUP}/{api_version}",
        "kind": "Cohort",
        "metadata": _metadata(cohort_name(department), {LABEL_DEPARTMENT: department.slug}),
        "spec": spec,
    }


def organisation_cohort_manifest(*, api_version: str = "v1beta2") -> dict:
    """The organisation's Cohort: the root the sharing departments' Cohorts hang from. It holds
    no quota of its own; the departments' teams lend theirs through it."""
    return {
        "apiVersion": f"{KUEUE_GROUP}/{api_version}",
        "kind": "Cohort",
        "metadata": _metadata(ORGANISATION_COHORT, {}),
        "spec": {},
    }


def covered_resources(quotas) -> list[str]:
    """What a team's ClusterQueue covers: CPU, memory, and the GPU resource of each of its
    pools (nvidia.com/gpu, a MIG pool's nvidia.com/mig-<profile>), GPUs first."""
    accel = sorted({q.pool.gpu_resource for q in quotas} | {GPU_RESOURCE},
                   key=lambda r: (r != GPU_RESOURCE, r))  # fmt: skip
    return ["cpu", "memory", *accel]


def _flavor_quota(quota, *, has_cohort: bool, size: WorkerSize, covered: list[str]) -> dict:
    """One flavor's quota: its pool's GPUs (or MIG instances) as granted, none of the other
    pools' GPU resources (every flavor of a resource group lists every covered resource), and
    CPU and memory as each GPU's share of a node (the pool's per-GPU figures), so quota stays a
    count of GPUs while Kueue, which refuses a workload requesting a resource its ClusterQueue
    does not cover, admits their CPU and memory; the limits scale the same way."""
    per_resource = [
        ("cpu", size.cpu_per_gpu_millis, cpu_text),
        ("memory", size.memory_per_gpu_mib, memory_text),
    ] + [(name, int(name == quota.pool.gpu_resource), int) for name in covered[2:]]
    resources = []
    for name, per_gpu, text in per_resource:
        resource: dict = {"name": name, "nominalQuota": text(quota.nominal_gpus * per_gpu)}
        # Kueue refuses borrowing/lending limits on a ClusterQueue without a cohort.
        if has_cohort and quota.borrowing_limit is not None:
            resource["borrowingLimit"] = text(quota.borrowing_limit * per_gpu)
        if has_cohort and quota.lending_limit is not None:
            resource["lendingLimit"] = text(quota.lending_limit * per_gpu)
        resources.append(resource)
    return {"name": flavor_name(quota.pool), "resources": resources}


def cluster_queue_manifest(
    team, quotas: Iterable, *, api_version: str = "v1beta2", sizes: dict | None = None,
    reclaim: str = "Any",
) -> dict:  # fmt: skip
    """A team as a Kueue ClusterQueue: one flavor entry per quota, in pool-name order.
    `sizes`: the pools' WorkerSize by pool id (a pool missing from it gets the defaults);
    `reclaim`: its reclaimWithinCohort (queues.manifests.protection.reclaim_policy)."""
    department = team.department
    has_cohort = department is not None
    quotas = sorted(quotas, key=lambda q: q.pool.name)
    sizes = sizes or {}
    spec: dict = {}
    if has_cohort:
        spec["cohort" if api_version == "v1beta1" else "cohortName"] = cohort_name(department)
    spec["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": team.namespace}}
    covered = covered_resources(quotas)
    spec["resourceGroups"] = (
        [
            {
                "coveredResources": covered,
                "flavors": [
                    _flavor_quota(
                        q,
                        has_cohort=has_cohort,
                        covered=covered,
                        size=sizes.get(q.pool_id, DEFAULT_WORKER_SIZE),
                    )  # fmt: skip
                    for q in quotas
                ],
            }
        ]
        if quotas
        else []
    )
    spec["preemption"] = {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": reclaim}
    spec["queueingStrategy"] = "BestEffortFIFO"
    spec["stopPolicy"] = "Hold" if team.queue_hold_reason else "None"
    if has_cohort and team.fair_share_weight != 1:  # 1 is Kueue's default weight
        spec["fairSharing"] = {"weight": fair_share_weight_text(team.fair_share_weight)}
    if team.member_fair_sharing:
        spec["admissionScope"] = {"admissionMode": ADMISSION_FAIR_SHARING}
    annotations = {ANNOTATION_HOLD: team.queue_hold_reason} if team.queue_hold_reason else None
    return {
        "apiVersion": f"{KUEUE_GROUP}/{api_version}",
        "kind": "ClusterQueue",
        "metadata": _metadata(cluster_queue_name(team), _team_labels(team), None, annotations),
        "spec": spec,
    }


def fair_share_weight_text(weight) -> str:
    """A weight as a Kubernetes quantity: 2, 0.5, 100 (never 1E+2)."""
    return f"{Decimal(weight).normalize():f}"


def local_queue_manifest(
    team, *, api_version: str = "v1beta2", name: str | None = None, weight=None, user=None
) -> dict:
    """The team's LocalQueue, pointing at its ClusterQueue; held together with it. With
    `name`, a member's own (`user`'s, labelled with their name) of fair-sharing `weight`."""
    labels = _team_labels(team)
    if user is not None:
        labels[LABEL_MEMBER] = to_dns1123_label(user.username)
    spec: dict = {
        "clusterQueue": cluster_queue_name(team),
        "stopPolicy": "Hold" if team.queue_hold_reason else "None",
    }
    if weight is not None and weight != 1:
        spec["fairSharing"] = {"weight": fair_share_weight_text(weight)}
    return {
        "apiVersion": f"{KUEUE_GROUP}/{api_version}",
        "kind": "LocalQueue",
        "metadata": _metadata(name or local_queue_name(team), labels, team.namespace),
        "spec": spec,
    }


def member_queue_manifests(team, members, *, api_version: str = "v1beta2") -> list[dict]:
    """The members' own LocalQueues: `members` is [(user, weight)] (weight None: 1)."""
    return [
        local_queue_manifest(team, api_version=api_version, name=member_queue_name(team, user),
                             weight=weight, user=user)
        for user, weight in sorted(members, key=lambda m: m[0].pk)
    ]  # fmt: skip


def workload_priority_class_manifest(tier, *, api_version: str = "v1beta2") -> dict:
    """A tier as a Kueue WorkloadPriorityClass (top-level value and description, no spec)."""
    manifest = {
        "apiVersion": f"{KUEUE_GROUP}/{api_version}",
        "kind": "WorkloadPriorityClass",
        "metadata": _metadata(priority_class_name(tier), {LABEL_TIER: tier.name}),
        "value": tier.value,
    }
    manifest["description"] = _tier_description(tier)
    return manifest


def _tier_description(tier) -> str:
    text = tier.description or tier.name
    if tier.preemptible:
        return text
    return f"{text} (not preempted by lower tiers; GPUs borrowed from other teams can be reclaimed)"


# -- Volcano -----------------------------------------------------------------------------------


def _gpus(quotas, amount) -> dict:
    """amount(quota) summed per GPU resource of the quotas' pools (a MIG pool's instances
    apart from whole GPUs); nvidia.com/gpu 0 when there are none."""
    totals: dict[str, int] = {}
    for q in quotas:
        totals[q.pool.gpu_resource] = totals.get(q.pool.gpu_resource, 0) + amount(q)
    return {name: str(value) for name, value in sorted(totals.items())} or {GPU_RESOURCE: "0"}


def volcano_department_queue_manifest(department, team_quotas: dict) -> dict:
    """A department as a parent Volcano Queue; deserves what its teams deserve."""
    quotas = [q for team in team_quotas.values() for q in team]
    deserved = _gpus(quotas, lambda q: q.nominal_gpus)
    spec: dict = {"weight": 1, "reclaimable": True, "deserved": deserved}
    return {
        "apiVersion": VOLCANO_QUEUE_API,
        "kind": "Queue",
        "metadata": _metadata(cohort_name(department), {LABEL_DEPARTMENT: department.slug}),
        "spec": spec,
    }


def volcano_pool_queue_name(team, pool) -> str:
    """The leaf Volcano Queue of a team in one pool: qm-<team>-<pool>-<hash>. The hash of the
    pair keeps team "a-b" in pool "c" apart from team "a" in pool "b-c" (and from team queues),
    and the name a DNS-1123 label however long the slugs."""
    digest = hashlib.sha256(f"{team.slug}/{pool.name}".encode()).hexdigest()[:6]
    return f"{cluster_queue_name(team)}-{pool.name}"[:56].rstrip("-") + f"-{digest}"


def _limits(spec: dict, quotas: list) -> dict:
    """deserved, capability and guarantee of the quotas summed (a team) or one quota (a pool)."""
    spec["deserved"] = _gpus(quotas, lambda q: q.nominal_gpus)
    if quotas and all(q.borrowing_limit is not None for q in quotas):
        spec["capability"] = _gpus(quotas, lambda q: q.nominal_gpus + q.borrowing_limit)
    lending = [q for q in quotas if q.lending_limit is not None]
    guaranteed = {
        name: value
        for name, value in _gpus(lending, lambda q: q.nominal_gpus - q.lending_limit).items()
        if int(value) > 0
    }
    if guaranteed:
        spec["guarantee"] = {"resource": guaranteed}
    return spec


def volcano_pool_queue_manifest(team, quota) -> dict:
    """The team's leaf Queue for one pool, under the team's Queue: that pool's quota."""
    spec = _limits({"weight": 1, "reclaimable": True, "parent": cluster_queue_name(team)}, [quota])
    labels = {**_team_labels(team), LABEL_POOL: quota.pool.name}
    return {
        "apiVersion": VOLCANO_QUEUE_API,
        "kind": "Queue",
        "metadata": _metadata(volcano_pool_queue_name(team, quota.pool), labels),
        "spec": spec,
    }


def volcano_team_queue_manifest(team, quotas: Iterable) -> dict:
    """A team as a Volcano Queue under its department's; quotas summed over the pools (each
    pool's own limit is its leaf Queue's)."""
    quotas = list(quotas)
    spec: dict = {"weight": 1, "reclaimable": True}
    if team.department is not None:
        spec["parent"] = cohort_name(team.department)
    spec = _limits(spec, quotas)
    if team.queue_hold_reason:
        spec["capability"] = dict.fromkeys(_gpus(quotas, lambda q: 0), "0")
    annotations = {ANNOTATION_HOLD: team.queue_hold_reason} if team.queue_hold_reason else None
    return {
        "apiVersion": VOLCANO_QUEUE_API,
        "kind": "Queue",
        "metadata": _metadata(cluster_queue_name(team), _team_labels(team), None, annotations),
        "spec": spec,
    }


def priority_class_manifest(tier) -> dict:
    """A tier as a Kubernetes PriorityClass (what Volcano jobs reference)."""
    manifest = {
        "apiVersion": PRIORITY_CLASS_API,
        "kind": "PriorityClass",
        "metadata": _metadata(priority_class_name(tier), {LABEL_TIER: tier.name}),
        "value": tier.value,
        "globalDefault": False,
        "description": _tier_description(tier),
    }
    return manifest


# -- the whole cluster (each scheduler's backend composes it, queues.backends) ------------------


def quotas_by_team(cluster, quotas) -> tuple[list, dict[int, list]]:
    """The quotas in the cluster's pools, and those by team id."""
    team_quotas: dict[int, list] = defaultdict(list)
    cluster_quotas = [q for q in quotas if q.pool.cluster_id == cluster.pk]
    for quota in cluster_quotas:
        team_quotas[quota.team_id].append(quota)
    return cluster_quotas, team_quotas


def volume_objects(cluster, volumes) -> list[tuple]:
    """(owner type, owner id, manifest) of the teams' volumes on the cluster."""
    return [
        (OWNER_TEAM, v.team_id, volume_manifest(v)) for v in volumes if v.cluster_id == cluster.pk
    ]
