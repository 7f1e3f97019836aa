"""Cluster lifecycle: platform admins disable, enable and delete clusters (portal, API and Django
admin); jobs follow, and a deleted cluster's objects are removed from it."""

import pytest
from django.urls import reverse

from fleet.models import Cluster, NodePool
from queues.models import AuditEvent, Job, ManagedObject
from queues.services.jobs.apply import job_apply
from tests.queues.builders import run_tasks_eagerly, submit

S = Job.State


@pytest.fixture
def eager(monkeypatch):
    run_tasks_eagerly(monkeypatch)


def _url(cluster, action=""):
    return f"/api/v1/clusters/{cluster.pk}/" + (f"{action}/" if action else "")


def test_only_platform_admins_change_a_clusters_lifecycle(sim_jobs, api_as):
    cluster = sim_jobs["cluster"]
    for who in ("alice", "bob", "maria", "frank"):
        client = api_as(sim_jobs[who])
        assert client.post(_url(cluster, "disable"), {"reason": "x"}).status_code in (403, 404)
        assert client.post(_url(cluster, "enable")).status_code in (403, 404)
        assert client.delete(_url(cluster)).status_code in (403, 404)
    cluster.refresh_from_db()
    assert cluster.enabled and cluster.deleted_at is None


def test_disable_holds_the_clusters_jobs_with_the_reason_and_enable_sends_them(
    sim_jobs, api_as, eager, django_capture_on_commit_callbacks
):
    cluster = sim_jobs["cluster"]
    admin = api_as(sim_jobs["admin"])
    with django_capture_on_commit_callbacks(execute=True):
        answer = admin.post(_url(cluster, "disable"), {"reason": "driver upgrade"}, format="json")
    assert answer.status_code == 200
    assert answer.json()["enabled"] is False
    assert answer.json()["disabled_reason"] == "driver upgrade"
    with django_capture_on_commit_callbacks(execute=True):
        job = submit(sim_jobs, name="waits for the upgrade", gpus_per_worker=1)
    job.refresh_from_db()
    assert job.state == S.SUBMITTED
    assert "is disabled by the platform admins (driver upgrade)" in job.pending_reason
    # Recorded as done by the admin who asked, with the reason.
    disabled = AuditEvent.objects.get(verb="cluster.disabled")
    assert disabled.actor == sim_jobs["admin"] and "driver upgrade" in disabled.message
    assert (disabled.before, disabled.after) == ({"enabled": True}, {"enabled": False})
    # Enabling asks why too.
    refused = admin.post(_url(cluster, "enable"), {}, format="json")
    assert refused.status_code == 400 and "reason" in refused.json()
    assert not Cluster.objects.get(pk=cluster.pk).enabled
    with django_capture_on_commit_callbacks(execute=True):
        answer = admin.post(_url(cluster, "enable"), {"reason": "drivers upgraded"}, format="json")
        assert answer.json()["enabled"] is True
    enabled = AuditEvent.objects.get(verb="cluster.enabled")
    assert enabled.actor == sim_jobs["admin"] and "drivers upgraded" in enabled.message
    job.refresh_from_db()
    assert job.state == S.QUEUED and job.pending_reason == ""


def test_disabling_a_cluster_asks_why_in_the_api_and_on_its_page(sim_jobs, api_as, client):
    cluster = sim_jobs["cluster"]
    for body in ({}, {"reason": "   "}):
        answer = api_as(sim_jobs["admin"]).post(_url(cluster, "disable"), body, format="json")
        assert answer.status_code == 400 and "reason" in answer.json()
    client.force_login(sim_jobs["admin"])
    client.post(reverse("fleet-cluster-disable", args=[cluster.pk]), {"reason": ""})
    assert Cluster.objects.get(pk=cluster.pk).enabled
    assert not AuditEvent.objects.filter(verb__startswith="cluster.").exists()
    page = client.get(reverse("fleet-cluster-edit", args=[cluster.pk])).content.decode()
    assert 'name="reason" maxlength="500" required' in page


def test_a_job_cancelled_while_its_cluster_is_disabled_is_deleted_there_only_once_enabled(
    sim_jobs, api_as, client, eager, django_capture_on_commit_callbacks
):
    """A disabled cluster gets no writes: the cancel is recorded (the job is cancelled, its
    deletion pending, and says so), and carried out when the cluster is enabled again."""
    cluster = sim_jobs["cluster"]
    sim = sim_jobs["sim"]
    job = submit(sim_jobs, name="cancelled meanwhile", gpus_per_worker=1)
    assert job_apply(job_id=job.pk) == "applied"
    job.refresh_from_db()

    def in_cluster():
        return sim.kube.get("batch/v1", "Job", job.k8s_name, job.team.namespace) is not None

    assert in_cluster()
    with django_capture_on_commit_callbacks(execute=True):
        api_as(sim_jobs["admin"]).post(
            _url(cluster, "disable"), {"reason": "maintenance"}, format="json"
        )
    with django_capture_on_commit_callbacks(execute=True):
        answer = api_as(sim_jobs["alice"]).post(f"/api/v1/jobs/{job.pk}/cancel/")
    assert answer.status_code == 200
    body = answer.json()
    assert body["state"] == "cancelled" and body["cluster_delete_pending"] is True
    assert "still in cluster" in body["pending_reason"]
    assert "deletion is sent to it when it is enabled again" in body["pending_reason"]
    assert in_cluster(), "a disabled cluster was written to"
    client.force_login(sim_jobs["alice"])
    page = client.get(reverse("job-detail", args=[job.pk])).content.decode()
    assert "still in cluster" in page and "maintenance" in page
    # The reconciler leaves it alone while the cluster is disabled ...
    from queues import tasks

    with django_capture_on_commit_callbacks(execute=True):
        tasks.reconcile_all()
    assert in_cluster()
    # ... and enabling the cluster carries it out.
    with django_capture_on_commit_callbacks(execute=True):
        enabled = api_as(sim_jobs["admin"]).post(
            _url(cluster, "enable"), {"reason": "maintenance done"}, format="json"
        )
        assert enabled.status_code == 200
    assert not in_cluster()
    job.refresh_from_db()
    assert job.state == S.CANCELLED and not job.cluster_delete_pending
    assert api_as(sim_jobs["alice"]).get(f"/api/v1/jobs/{job.pk}/").json()["pending_reason"] == ""


def test_a_pending_deletion_the_task_gave_up_on_is_sent_again_by_the_reconciler(
    sim_jobs, eager, django_capture_on_commit_callbacks
):
    from datetime import timedelta

    from django.utils import timezone

    from queues import tasks

    job = submit(sim_jobs, name="orphan", gpus_per_worker=1)
    assert job_apply(job_id=job.pk) == "applied"
    job.refresh_from_db()
    Job.objects.filter(pk=job.pk).update(
        state=S.CANCELLED, cluster_delete_pending=True,
        finished_at=timezone.now() - timedelta(minutes=5),
    )  # fmt: skip
    with django_capture_on_commit_callbacks(execute=True):
        tasks.reconcile_all()
    assert sim_jobs["sim"].kube.get("batch/v1", "Job", job.k8s_name, job.team.namespace) is None
    assert not Job.objects.get(pk=job.pk).cluster_delete_pending


def test_delete_is_refused_with_active_jobs_and_force_cancels_them(
    sim_jobs, api_as, eager, django_capture_on_commit_callbacks
):
    cluster = sim_jobs["cluster"]
    sim = sim_jobs["sim"]
    job = submit(sim_jobs, name="still running", gpus_per_worker=1)
    assert job_apply(job_id=job.pk) == "applied"
    admin = api_as(sim_jobs["admin"])
    refused = admin.delete(_url(cluster))
    assert refused.status_code == 400
    assert "1 job(s) are active" in str(refused.json())
    assert ManagedObject.objects.filter(cluster=cluster).exists()
    with django_capture_on_commit_callbacks(execute=True):
        assert admin.delete(_url(cluster) + "?force=true").status_code == 204
    job.refresh_from_db()
    assert job.state == S.CANCELLED
    assert "was deleted by admin" in job.transitions.last().reason
    # The objects the portal kept there are gone from the cluster and from the portal; the row
    # stays, hidden, because the job's history refers to it.
    assert not ManagedObject.objects.filter(cluster=cluster).exists()
    namespaces = {n["metadata"]["name"] for n in sim.kube.list("v1", "Namespace")}
    assert job.team.namespace not in namespaces
    assert not sim.kube.list("kueue.x-k8s.io/v1beta2", "ClusterQueue")
    assert Cluster.objects.filter(pk=cluster.pk, deleted_at__isnull=False).exists()
    assert admin.get("/api/v1/clusters/").json()["count"] == 0
    assert admin.get(_url(cluster)).status_code == 404


def test_a_cluster_nothing_refers_to_is_removed_entirely(
    world, api_as, eager, django_capture_on_commit_callbacks, tmp_path
):
    config = tmp_path / "kubeconfig"
    config.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    cluster = Cluster.objects.create(name="typo", kubeconfig_path=str(config))
    with django_capture_on_commit_callbacks(execute=True):
        assert api_as(world["admin"]).delete(_url(cluster)).status_code == 204
    assert not Cluster.objects.filter(pk=cluster.pk).exists()


def test_the_cluster_page_shows_health_and_offers_disable_and_delete(sim_jobs, client):
    cluster = sim_jobs["cluster"]
    Cluster.objects.filter(pk=cluster.pk).update(last_error="500 InternalError: boom")
    client.force_login(sim_jobs["admin"])
    page = client.get(reverse("fleet-cluster-edit", args=[cluster.pk])).content.decode()
    assert 'data-testid="cluster-health"' in page and "500 InternalError: boom" in page
    assert reverse("fleet-cluster-disable", args=[cluster.pk]) in page
    overview = client.get(reverse("fleet-overview")).content.decode()
    assert f'data-testid="health-{cluster.name}"' in overview
    answer = client.post(reverse("fleet-cluster-disable", args=[cluster.pk]), {"reason": "x"})
    assert answer.status_code == 302
    assert not Cluster.objects.get(pk=cluster.pk).enabled
    assert AuditEvent.objects.get(verb="cluster.disabled").actor == sim_jobs["admin"]
    client.force_login(sim_jobs["alice"])
    assert client.post(reverse("fleet-cluster-enable", args=[cluster.pk])).status_code == 403


def test_platform_admins_may_delete_a_cluster_in_django_admin(world, client, tmp_path):
    config = tmp_path / "kubeconfig"
    config.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    cluster = Cluster.objects.create(name="old", kubeconfig_path=str(config))
    admin = world["admin"]
    assert not admin.is_superuser
    client.force_login(admin)
    url = reverse("admin:fleet_cluster_delete", args=[cluster.pk])
    page = client.get(url)
    assert page.status_code == 200
    client.post(url, {"post": "yes"})
    assert Cluster.objects.get(pk=cluster.pk).deleted_at is not None
    assert not NodePool.objects.filter(cluster=cluster).exists()
