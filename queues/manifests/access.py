"""What the portal's own processes may do in a team's namespace, rendered beside its guard
rails (pure functions, model -> dict): one RoleBinding per ClusterRole of
KUBE_TEAM_NAMESPACE_ROLES, to the portal's ServiceAccounts that setting names.

The chart sets it: its web and workers reach team Secrets through these bindings only, so no
grant of theirs reaches a Secret outside the namespaces the portal manages (kube-system's, say),
not even by name. Empty (kubesim, `make run`, a cluster whose admin grants otherwise): none."""

from __future__ import annotations

from django.conf import settings

from queues.manifests.common import LABEL_MANAGED_BY, LABEL_TEAM, MANAGED_BY

BINDING_PREFIX = "qm-portal-"


def binding_name(role: str) -> str:
    return f"{BINDING_PREFIX}{role}"[:253]


def portal_access_manifests(team) -> list[dict]:
    """The RoleBindings that give the portal's accounts their roles in the team's namespace."""
    out = []
    for role, accounts in sorted(settings.KUBE_TEAM_NAMESPACE_ROLES.items()):
        subjects = []
        for account in accounts:
            namespace, _, name = account.partition("/")
            subjects.append({"kind": "ServiceAccount", "namespace": namespace, "name": name})
        out.append({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {
                "name": binding_name(role), "namespace": team.namespace,
                "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_TEAM: team.slug},
            },
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": role},
            "subjects": subjects,
        })  # fmt: skip
    return out
