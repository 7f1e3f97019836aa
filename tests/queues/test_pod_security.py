"""Pod defaults a security review expects: every rendered job's pods drop privilege escalation
and capabilities, use the runtime's seccomp profile and mount no service account token; team
namespaces are labelled for Pod Security admission (baseline enforced, restricted warned and
audited); a platform admin may exempt a team, with a reason the audit log keeps, and kubesim
enforces the baseline on pods as an API server does."""

import pytest
from django.urls import reverse

from queues.backends import backend_named
from queues.manifests.quotas import namespace_manifest
from queues.models import AuditEvent, Job, Quota, Team
from queues.services.jobs.apply import job_apply
from queues.services.reconcile import cluster_reconcile
from tests.crd_validation import assert_valid_manifest
from tests.fixtures_cluster import make_sim_cluster
from tests.queues.builders import (
    job_world_setup,
    make_tiers,
    pod_template_specs,
    render_every_job_kind,
    submit,
    sync_until,
)

PSA = "pod-security.kubernetes.io"
CONTAINER = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


@pytest.fixture
def offline(world):
    return job_world_setup(world)


def test_every_rendered_job_carries_the_security_defaults_and_stays_valid(offline):
    objects = render_every_job_kind(offline)
    kinds = {(o["apiVersion"], o["kind"]) for o in objects}
    assert {
        ("batch/v1", "Job"), ("kubeflow.org/v1", "PyTorchJob"),
        ("jobset.x-k8s.io/v1alpha2", "JobSet"), ("batch.volcano.sh/v1alpha1", "Job"),
    } <= kinds  # fmt: skip
    specs = 0
    for obj in objects:
        assert_valid_manifest(obj)
        for spec in pod_template_specs(obj):
            specs += 1
            assert spec["automountServiceAccountToken"] is False
            assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
            for container in spec["containers"]:
                assert container["securityContext"] == CONTAINER, container["name"]
    assert specs >= 7  # job, indexed, master and worker, driver and workers, volcano task


def test_team_namespaces_enforce_baseline_and_warn_and_audit_restricted(offline, settings):
    labels = namespace_manifest(offline["vision"])["metadata"]["labels"]
    assert labels[f"{PSA}/enforce"] == "baseline"
    assert labels[f"{PSA}/enforce-version"] == settings.POD_SECURITY_VERSION
    assert labels[f"{PSA}/warn"] == labels[f"{PSA}/audit"] == "restricted"
    assert labels[f"{PSA}/warn-version"] == labels[f"{PSA}/audit-version"] == "latest"
    assert_valid_manifest(namespace_manifest(offline["vision"]))


def test_an_exempt_team_gets_no_defaults_and_no_enforcement(offline):
    Team.objects.filter(pk=offline["vision"].pk).update(
        pod_security_exempt=True, pod_security_exempt_reason="RDMA needs IPC_LOCK"
    )
    offline["vision"].refresh_from_db()
    labels = namespace_manifest(offline["vision"])["metadata"]["labels"]
    assert labels[f"{PSA}/enforce"] == "privileged" and labels[f"{PSA}/warn"] == "restricted"
    job = submit(offline, name="exempt")
    job = Job.objects.select_related("team").get(pk=job.pk)
    (obj,) = backend_named("kueue").job_objects(job)
    spec = obj["spec"]["template"]["spec"]
    assert "securityContext" not in spec and "automountServiceAccountToken" not in spec
    assert "securityContext" not in spec["containers"][0]


def _exempt_url(team) -> str:
    return f"/api/v1/teams/{team.slug}/pod-security/"


def test_only_platform_admins_exempt_a_team_and_the_audit_keeps_who_and_why(offline, api_as):
    team = offline["vision"]
    for who in ("alice", "bob", "maria", "frank"):
        answer = api_as(offline[who]).post(
            _exempt_url(team), {"exempt": True, "reason": "x"}, format="json"
        )
        assert answer.status_code in (403, 404), who
    team.refresh_from_db()
    assert not team.pod_security_exempt
    admin = api_as(offline["admin"])
    missing = admin.post(_exempt_url(team), {"exempt": True}, format="json")
    assert missing.status_code == 400 and "reason" in missing.json()
    answer = admin.post(
        _exempt_url(team), {"exempt": True, "reason": "InfiniBand needs IPC_LOCK"}, format="json"
    )
    assert answer.status_code == 200, answer.content
    assert answer.json() == {"exempt": True, "reason": "InfiniBand needs IPC_LOCK",
                             "enforced": "privileged"}  # fmt: skip
    event = AuditEvent.objects.get(verb="team.pod_security")
    assert event.actor == offline["admin"] and event.team_id == team.pk
    assert "InfiniBand needs IPC_LOCK" in event.message
    assert event.before == {"pod_security_exempt": False}
    assert event.after == {"pod_security_exempt": True, "reason": "InfiniBand needs IPC_LOCK"}
    # Anyone who sees the team reads it; back to enforced, audited again.
    assert api_as(offline["alice"]).get(_exempt_url(team)).json()["exempt"] is True
    back = api_as(offline["admin"]).post(
        _exempt_url(team), {"exempt": False, "reason": "Done"}, format="json"
    )
    assert back.json() == {"exempt": False, "reason": "", "enforced": "baseline"}
    assert AuditEvent.objects.filter(verb="team.pod_security").count() == 2


def test_the_team_page_shows_pod_security_and_only_admins_get_the_form(offline, client):
    team = offline["vision"]
    client.force_login(offline["bob"])
    page = client.get(reverse("team-detail", args=[team.slug])).content.decode()
    assert "Pod security" in page and "baseline" in page
    assert reverse("team-pod-security", args=[team.slug]) not in page
    refused = client.post(reverse("team-pod-security", args=[team.slug]),
                          {"exempt": "on", "reason": "mine"})  # fmt: skip
    assert refused.status_code in (403, 404)
    client.force_login(offline["admin"])
    page = client.get(reverse("team-detail", args=[team.slug])).content.decode()
    assert reverse("team-pod-security", args=[team.slug]) in page
    empty = client.post(reverse("team-pod-security", args=[team.slug]), {"exempt": "on"})
    assert empty.status_code == 302
    team.refresh_from_db()
    assert not team.pod_security_exempt  # refused: no reason
    client.post(reverse("team-pod-security", args=[team.slug]),
                {"exempt": "on", "reason": "Profilers need perf events"})  # fmt: skip
    team.refresh_from_db()
    assert team.pod_security_exempt and team.pod_security_exempt_reason == (
        "Profilers need perf events"
    )
    page = client.get(reverse("team-detail", args=[team.slug])).content.decode()
    assert "Profilers need perf events" in page


def test_kubesim_enforces_the_baseline_and_the_portals_jobs_still_run(world):
    """In a labelled namespace a privileged pod is refused as an API server refuses it; the
    portal's own jobs, with their defaults, run; an exempt team's namespace admits both."""
    from fleet import kube

    make_tiers()
    with make_sim_cluster() as sim:
        sim.sync()
        Quota.objects.create(team=world["vision"], pool=sim.pools["a100"], nominal_gpus=8)
        cluster_reconcile(cluster_id=sim.cluster.pk)
        ns = world["vision"].namespace
        live = sim.kube.get("v1", "Namespace", ns)
        assert live["metadata"]["labels"][f"{PSA}/enforce"] == "baseline"
        privileged = {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "root", "namespace": ns},
            "spec": {"containers": [{"name": "main", "image": "busybox",
                                     "securityContext": {"privileged": True}}],
                     "hostNetwork": True},
        }  # fmt: skip
        with pytest.raises(kube.PermanentError) as refused:
            sim.kube.apply(privileged)
        assert refused.value.status == 403
        assert 'violates PodSecurity "baseline:' in refused.value.message
        assert "privileged" in refused.value.message and "hostNetwork=true" in refused.value.message
        job = submit(world, name="secure", gpus_per_worker=1, pool=sim.pools["a100"])
        assert job_apply(job_id=job.pk) == "applied"
        job = sync_until(job, Job.State.RUNNING)
        assert job.state == Job.State.RUNNING
        (pod,) = sim.kube.list(
            "v1", "Pod", namespace=ns, label_selector=f"quartermaster.dev/job-id={job.pk}"
        )
        assert pod["spec"]["containers"][0]["securityContext"] == CONTAINER
        # Exempt: the namespace is relabelled and admits the privileged pod.
        Team.objects.filter(pk=world["vision"].pk).update(
            pod_security_exempt=True, pod_security_exempt_reason="debugging"
        )
        cluster_reconcile(cluster_id=sim.cluster.pk)
        assert sim.kube.get("v1", "Namespace", ns)["metadata"]["labels"][f"{PSA}/enforce"] == (
            "privileged"
        )
        sim.kube.apply(privileged)
