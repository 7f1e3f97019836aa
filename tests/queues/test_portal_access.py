"""The portal's own accounts in each team namespace (KUBE_TEAM_NAMESPACE_ROLES, which the chart
sets): a RoleBinding per role, reconciled with the guard rails and put back when deleted; the
team page lists the team's groups, not these accounts. Without the setting, none."""

from django.urls import reverse

from queues.manifests.access import portal_access_manifests
from queues.services.reconcile import cluster_check_drift, cluster_reconcile

RBAC = "rbac.authorization.k8s.io/v1"
ROLES = {"qm-team-web": ["portal/qm-web"], "qm-team-worker": ["portal/qm-worker"]}


def test_the_portals_accounts_get_their_roles_in_each_team_namespace(sim_jobs, settings, client):
    kube, ns = sim_jobs["sim"].kube, sim_jobs["vision"].namespace
    assert kube.get(RBAC, "RoleBinding", "qm-portal-qm-team-web", ns) is None
    settings.KUBE_TEAM_NAMESPACE_ROLES = ROLES
    cluster_reconcile(cluster_id=sim_jobs["cluster"].pk)
    binding = kube.get(RBAC, "RoleBinding", "qm-portal-qm-team-web", ns)
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": "qm-team-web"}  # fmt: skip
    assert binding["subjects"] == [{"kind": "ServiceAccount", "namespace": "portal",
                                    "name": "qm-web"}]  # fmt: skip
    assert kube.get(RBAC, "RoleBinding", "qm-portal-qm-team-worker", ns)["subjects"][0]["name"] == (
        "qm-worker"
    )
    kube.delete(RBAC, "RoleBinding", "qm-portal-qm-team-web", ns)
    assert cluster_check_drift(cluster_id=sim_jobs["cluster"].pk)["drifted"]
    cluster_reconcile(cluster_id=sim_jobs["cluster"].pk)
    assert kube.get(RBAC, "RoleBinding", "qm-portal-qm-team-web", ns)
    client.force_login(sim_jobs["bob"])
    page = client.get(reverse("team-detail", args=[sim_jobs["vision"].slug])).content.decode()
    assert "quartermaster:team:vision" in page and "qm-web" not in page
    # The setting gone, so are the bindings.
    settings.KUBE_TEAM_NAMESPACE_ROLES = {}
    cluster_reconcile(cluster_id=sim_jobs["cluster"].pk)
    assert kube.get(RBAC, "RoleBinding", "qm-portal-qm-team-web", ns) is None


def test_without_the_setting_no_binding_is_rendered(world, settings):
    settings.KUBE_TEAM_NAMESPACE_ROLES = {}
    assert portal_access_manifests(world["vision"]) == []
