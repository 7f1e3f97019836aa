"""Namespace guard rails, reconciled into kubesim with the queues: a ResourceQuota at the team's
ceiling that kubesim enforces, default CPU and memory, network policies and the team group's
edit rights; put back when deleted in the cluster, audited; shown on the team page."""

from django.urls import reverse

from queues.models import AuditEvent, Job
from queues.services.jobs.apply import job_apply
from queues.services.reconcile import cluster_check_drift, cluster_reconcile
from tests.queues.builders import submit, sync_until


def _get(sim, kind, name, namespace, api_version="v1"):
    return sim["sim"].kube.get(api_version, kind, name, namespace)


def test_guard_rails_reach_the_namespace_and_are_repaired(sim_jobs):
    ns = sim_jobs["vision"].namespace
    quota = _get(sim_jobs, "ResourceQuota", "qm-guardrails", ns)
    # vision: 8 A100 + 4 it may borrow, 4 L4 that borrow nothing.
    assert quota["spec"]["hard"] == {"requests.nvidia.com/gpu": "16", "pods": "500"}
    defaults = _get(sim_jobs, "LimitRange", "qm-defaults", ns)["spec"]["limits"][0]
    assert defaults["defaultRequest"] == {"cpu": "1", "memory": "2Gi"}
    binding = _get(sim_jobs, "RoleBinding", "qm-team-edit", ns,
                   "rbac.authorization.k8s.io/v1")  # fmt: skip
    assert binding["roleRef"]["name"] == "edit"
    assert binding["subjects"][0]["name"] == "quartermaster:team:vision"
    netpol = ("networking.k8s.io/v1", "NetworkPolicy", "qm-same-namespace", ns)
    assert sim_jobs["sim"].kube.get(*netpol)["spec"]["ingress"] == [{"from": [{"podSelector": {}}]}]
    sim_jobs["sim"].kube.delete(*netpol)
    assert cluster_check_drift(cluster_id=sim_jobs["cluster"].pk)["drifted"]
    cluster_reconcile(cluster_id=sim_jobs["cluster"].pk)
    assert sim_jobs["sim"].kube.get(*netpol)
    assert AuditEvent.objects.filter(verb="managed_object.drift", object_repr__contains=
                                     "qm-same-namespace").exists()  # fmt: skip


def test_the_team_page_shows_the_guard_rails_with_what_is_in_use(sim_jobs, client):
    job = submit(sim_jobs, gpus_per_worker=2, expected_runtime_seconds=120)
    assert job_apply(job_id=job.pk) == "applied"
    sync_until(job, Job.State.RUNNING)
    cluster_check_drift(cluster_id=sim_jobs["cluster"].pk)  # reads the quota's status.used
    client.force_login(sim_jobs["alice"])
    page = client.get(reverse("team-detail", args=["vision"])).content.decode()
    row = page[page.index('data-testid="guardrails-kubesim"') :]
    row = row[: row.index("</tr>")]
    assert "2 / 16" in row and "1 / 500" in row
    assert "1 CPU, 2Gi" in row and "quartermaster:team:vision" in row
