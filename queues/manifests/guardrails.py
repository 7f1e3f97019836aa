"""A team namespace's guard rails, rendered beside its queues (pure functions, model -> dict):

- ResourceQuota `qm-guardrails`: GPUs requested at most the team's ceiling on the cluster (its
  nominal quota plus what it may borrow, summed over the cluster's pools) and a pod count, so
  nothing created in the namespace outside the portal exceeds what Kueue would admit;
- LimitRange `qm-defaults`: CPU and memory for containers that do not say (the portal's jobs
  always do);
- NetworkPolicies: `qm-same-namespace` admits traffic only from the namespace's own pods (the
  workers of a distributed job reach each other; other teams do not), and `qm-egress` lets the
  pods reach DNS, the namespace, and the destinations a platform admin allows
  (TEAM_EGRESS_CIDRS, the outside world by default: package registries, experiment trackers),
  never the cloud's metadata address (which hands out the node's credentials);
- RoleBinding `qm-team-edit`: Kubernetes' `edit` role in the namespace to the group
  `quartermaster:team:<slug>`, which an identity provider's group claim can carry.
"""

from __future__ import annotations

import ipaddress

from django.conf import settings

from fleet.quantities import CPU_ONLY_WORKER_MIB, CPU_ONLY_WORKER_MILLIS, cpu_text, memory_text
from queues.manifests.common import GPU_RESOURCE, LABEL_MANAGED_BY, LABEL_TEAM, MANAGED_BY

RESOURCE_QUOTA = "qm-guardrails"
LIMIT_RANGE = "qm-defaults"
MAX_PODS = 500
TEAM_GROUP_PREFIX = "quartermaster:team:"
GUARDRAIL_KINDS = ("ResourceQuota", "LimitRange", "NetworkPolicy", "RoleBinding")


def team_group(team) -> str:
    """The group whose members get edit rights in the team's namespace."""
    return f"{TEAM_GROUP_PREFIX}{team.slug}"


def lends_to(team, other) -> bool:
    """Whether the two teams' queues share idle quota: the same department's Cohort, or two
    departments that both share with the organisation (its Cohort is their parent)."""
    if team.department_id == other.department_id:
        return True
    return bool(team.department.shares_with_organisation
                and other.department.shares_with_organisation)  # fmt: skip


def team_ceiling(team, quotas, resource: str = GPU_RESOURCE) -> int:
    """The most GPUs (of one GPU resource: MIG pools count their instances apart) the team
    can hold on a cluster: per pool its nominal quota plus its borrowing limit, or without one
    all that the other teams it shares quota with (see lends_to) may lend there."""
    total = 0
    for quota in quotas:
        if quota.pool.gpu_resource != resource:
            continue
        if quota.team_id != team.pk:
            continue
        if quota.borrowing_limit is not None:
            borrow = quota.borrowing_limit
        else:
            borrow = sum(
                q.nominal_gpus if q.lending_limit is None else min(q.lending_limit, q.nominal_gpus)
                for q in quotas
                if q.pool_id == quota.pool_id and q.team_id != team.pk and lends_to(team, q.team)
            )  # fmt: skip
        total += quota.nominal_gpus + borrow
    return total


def egress_destinations(cidrs) -> list[dict]:
    """NetworkPolicy peers for the allowed CIDRs, each with the cloud metadata addresses it
    contains carved out (settings refuse a CIDR that lies inside one)."""
    peers = []
    for cidr in cidrs:
        network = ipaddress.ip_network(cidr)
        carved = [
            str(meta)
            for meta in map(ipaddress.ip_network, settings.CLOUD_METADATA_ADDRESSES)
            if meta.version == network.version and meta.subnet_of(network) and meta != network
        ]
        block: dict = {"cidr": str(network)}
        if carved:
            block["except"] = carved
        peers.append({"ipBlock": block})
    return peers


def _meta(team, name: str) -> dict:
    return {
        "name": name,
        "namespace": team.namespace,
        "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_TEAM: team.slug},
    }


def guardrail_manifests(team, quotas) -> list[dict]:
    """The guard rails of the team's namespace on a cluster (`quotas`: the cluster's quotas)."""
    hard = {f"requests.{GPU_RESOURCE}": str(team_ceiling(team, quotas))}
    for resource in sorted({q.pool.gpu_resource for q in quotas if q.team_id == team.pk}):
        hard[f"requests.{resource}"] = str(team_ceiling(team, quotas, resource))
    same_namespace = [{"podSelector": {}}]
    allowed = egress_destinations(settings.TEAM_EGRESS_CIDRS)
    dns = {
        "to": [{
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
        }],
        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
    }  # fmt: skip
    return [
        {
            "apiVersion": "v1", "kind": "ResourceQuota", "metadata": _meta(team, RESOURCE_QUOTA),
            "spec": {"hard": {**hard, "pods": str(MAX_PODS)}},
        },
        {
            "apiVersion": "v1", "kind": "LimitRange", "metadata": _meta(team, LIMIT_RANGE),
            "spec": {"limits": [{
                "type": "Container",
                "defaultRequest": {"cpu": cpu_text(CPU_ONLY_WORKER_MILLIS),
                                   "memory": memory_text(CPU_ONLY_WORKER_MIB)},
                "default": {"memory": memory_text(CPU_ONLY_WORKER_MIB)},
            }]},
        },
        {
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": _meta(team, "qm-same-namespace"),
            "spec": {"podSelector": {}, "policyTypes": ["Ingress"],
                     "ingress": [{"from": same_namespace}]},
        },
        {
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": _meta(team, "qm-egress"),
            "spec": {"podSelector": {}, "policyTypes": ["Egress"], "egress": [
                dns, {"to": same_namespace},
                *([{"to": allowed}] if allowed else []),
            ]},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": _meta(team, "qm-team-edit"),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "edit"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                          "name": team_group(team)}],
        },
    ]  # fmt: skip
