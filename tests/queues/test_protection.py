"""Preemption protection and checkpoint-aware victims: the classes rendered for Kueue, the
tier setting, checkpoint reports, the sweep, and Kueue (kubesim) choosing its victim by them."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from queues.backends.kueue import KueueBackend
from queues.manifests.protection import class_values, desired_class
from queues.models import AuditEvent, Job, JobCheckpoint, JobPreemption, PriorityTier
from queues.services import protection
from queues.services.jobs.apply import job_apply
from queues.services.reconcile import cluster_reconcile
from queues.services.tiers import tier_save
from tests.crd_validation import assert_valid_manifest
from tests.queues.builders import run_tasks_eagerly, submit, sync_until

S = Job.State


def _protect(tiers, name="experiment", minutes=10):
    tier = tiers[name]
    tier.protection_minutes = minutes
    tier.save()
    return tier


# -- what is rendered ---------------------------------------------------------------------------


def test_no_protection_renders_what_it_did_before(jw):
    objs = KueueBackend().cluster_objects(
        cluster=jw["cluster"], pools=list(jw["pools"].values()), departments=[],
        teams=[jw["vision"]], tiers=list(PriorityTier.objects.all()), quotas=[],
    )  # fmt: skip
    classes = [m["metadata"]["name"] for _, _, m in objs if m["kind"] == "WorkloadPriorityClass"]
    assert sorted(classes) == ["development", "experiment", "experiment-high", "production"]
    cq = next(m for _, _, m in objs if m["kind"] == "ClusterQueue")
    assert cq["spec"]["preemption"]["reclaimWithinCohort"] == "Any"


def test_protection_renders_a_family_of_classes_and_lower_priority_reclaim(jw):
    _protect(jw["tiers"])
    tiers = list(PriorityTier.objects.all())
    objs = KueueBackend().cluster_objects(
        cluster=jw["cluster"], pools=list(jw["pools"].values()), departments=[],
        teams=[jw["vision"]], tiers=tiers, quotas=[],
    )  # fmt: skip
    values = {
        m["metadata"]["name"]: m["value"]
        for _, _, m in objs
        if m["kind"] == "WorkloadPriorityClass"
    }
    # Protected: above every tier (production 1000), keeping the tiers' order.
    assert values["experiment-protected"] == 1000 + 1 + (100 - 10)
    assert values["experiment"] == 100
    assert values["experiment-running"] == 99
    assert values["experiment-saved-60m"] == 98
    assert values["experiment-saved-15m"] == 97
    assert values["experiment-saved-5m"] == 96
    # Tiers without a window get the lowered classes (so their borrowers stay reclaimable by
    # their own tier) but no protected one.
    assert values["production-running"] == 999
    assert "production-protected" not in values
    assert min(v for n, v in values.items() if n.startswith("experiment")) > values["development"]
    for _, _, manifest in objs:
        if manifest["kind"] in ("WorkloadPriorityClass", "ClusterQueue"):
            assert_valid_manifest(manifest)
    cq = next(m for _, _, m in objs if m["kind"] == "ClusterQueue")
    assert cq["spec"]["preemption"] == {
        "withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "LowerPriority"
    }  # fmt: skip


def test_the_class_a_job_carries_follows_its_window_and_its_last_checkpoint(jw):
    tier = _protect(jw["tiers"])
    start = timezone.now()

    def cls(now, checkpoint=None, running=True):
        return desired_class(tier=tier, tiers_protect=True, running=running,
                             run_started_at=start, checkpoint_at=checkpoint, now=now)  # fmt: skip

    assert cls(start + timedelta(minutes=9)) == "experiment-protected"
    assert cls(start + timedelta(minutes=10)) == "experiment-running"
    later = start + timedelta(minutes=30)
    assert cls(later, checkpoint=later - timedelta(minutes=2)) == "experiment-saved-5m"
    assert cls(later, checkpoint=later - timedelta(minutes=12)) == "experiment-saved-15m"
    assert cls(later, checkpoint=later - timedelta(minutes=29)) == "experiment-saved-60m"
    # A checkpoint from before this run is not this run's: nothing saved since it began.
    assert cls(later, checkpoint=start - timedelta(minutes=1)) == "experiment-running"
    assert cls(later, running=False) == ""
    assert class_values(jw["tiers"]["development"], [jw["tiers"]["development"]]) == {}


# -- the tier setting ---------------------------------------------------------------------------


def test_admin_sets_the_guaranteed_runtime_through_the_api_with_field_errors(jw, api_as):
    api = api_as(jw["admin"])
    tier = jw["tiers"]["experiment"]
    url = reverse("tier-detail", args=[tier.pk])
    bad = api.patch(url, {"protection_minutes": -5}, format="json")
    assert bad.status_code == 400 and "protection_minutes" in bad.json()
    too_long = api.patch(url, {"protection_minutes": 100000}, format="json")
    assert too_long.status_code == 400 and "protection_minutes" in too_long.json()
    ok = api.patch(url, {"protection_minutes": 15}, format="json")
    assert ok.status_code == 200, ok.content
    assert ok.json()["protection_minutes"] == 15
    event = AuditEvent.objects.filter(verb="tier.change").latest("id")
    assert event.before["protection_minutes"] == 0 and event.after["protection_minutes"] == 15
    # Protection lowers running jobs up to 4 below their tier: tiers closer than 5 are refused.
    close = api.post(reverse("tier-list"), {"name": "experiment-plus", "value": 103},
                     format="json")  # fmt: skip
    assert close.status_code == 400 and "value" in close.json()
    # Researchers read tiers but do not change them.
    denied = api_as(jw["alice"]).patch(url, {"protection_minutes": 0}, format="json")
    assert denied.status_code == 403


def test_admin_sets_the_guaranteed_runtime_on_the_tier_page(jw, client):
    client.force_login(jw["admin"])
    tier = jw["tiers"]["experiment"]
    url = reverse("quota-tier-edit", args=[tier.pk])
    form = {"name": "experiment", "value": 100, "preemptible": "on", "is_default": "on",
            "protection_minutes": "abc"}  # fmt: skip
    page = client.post(url, form)
    assert page.status_code == 200
    assert "Enter a whole number" in page.content.decode()
    form["protection_minutes"] = "20"
    assert client.post(url, form).status_code == 302
    tier.refresh_from_db()
    assert tier.protection_minutes == 20
    listing = client.get(reverse("quota-tiers")).content.decode()
    assert "20 min" in listing


def test_tier_save_refuses_values_too_close_once_protection_is_on(jw):
    with pytest.raises(Exception) as refused:
        tier_save(actor=jw["admin"], tier=jw["tiers"]["experiment-high"], protection_minutes=5,
                  value=102)  # fmt: skip
    assert "protection_minutes" in refused.value.message_dict


# -- checkpoints --------------------------------------------------------------------------------


def _running(job):
    from queues.services.jobs.lifecycle import job_transition

    job_transition(job_id=job.pk, to_state=S.RUNNING, reason="test")
    job.refresh_from_db()
    return job


def test_a_running_job_reports_checkpoints_through_the_api(jw, api_as):
    job = _running(submit(jw, name="ckpt"))
    url = reverse("api-job-checkpoints", args=[job.pk])
    owner = api_as(jw["alice"])
    bad = owner.post(url, {"step": -1, "path": "x" * 600}, format="json")
    assert bad.status_code == 400
    assert set(bad.json()) >= {"step", "path"}
    made = owner.post(url, {"step": 1200, "path": "/checkpoints/step-1200"}, format="json")
    assert made.status_code == 201, made.content
    assert made.json()["step"] == 1200 and made.json()["reported_by"] == "alice"
    job.refresh_from_db()
    assert job.last_checkpoint_at is not None
    event = AuditEvent.objects.get(verb="job.checkpoint")
    assert event.after["step"] == 1200 and event.team == jw["vision"]
    listed = owner.get(url).json()
    assert [c["step"] for c in listed] == [1200]
    # carol (another team) cannot see the job; a teammate who is not its owner nor a lead
    # cannot report for it.
    assert api_as(jw["carol"]).post(url, {}, format="json").status_code == 404
    from tests.factories import MembershipFactory, UserFactory

    dave = UserFactory(username="dave")
    MembershipFactory(user=dave, team=jw["vision"], role="member")
    assert api_as(dave).post(url, {}, format="json").status_code == 403
    # The lead may.
    assert api_as(jw["bob"]).post(url, {"step": 1300}, format="json").status_code == 201
    assert JobCheckpoint.objects.filter(job=job).count() == 2


def test_only_a_running_job_reports_a_checkpoint(jw, api_as):
    job = submit(jw, name="waiting")
    answer = api_as(jw["alice"]).post(
        reverse("api-job-checkpoints", args=[job.pk]), {"step": 1}, format="json"
    )
    assert answer.status_code == 400
    assert "only a running job" in str(answer.json())


# -- the sweep ----------------------------------------------------------------------------------


def test_the_sweep_moves_jobs_between_classes_and_is_idempotent(jw, monkeypatch):
    _protect(jw["tiers"])
    sent = []
    monkeypatch.setattr(protection, "_enqueue_apply", sent.append)
    job = _running(submit(jw, name="swept"))
    now = timezone.now()
    assert protection.protection_sweep(now=now)["changed"] == 1
    job.refresh_from_db()
    assert job.priority_class == "experiment-protected"
    assert sent == [job.pk]
    # Nothing changed: a second run moves nothing, but sends again what did not reach the
    # cluster (the apply task never ran here).
    again = protection.protection_sweep(now=now)
    assert again["changed"] == 0 and again["resent"] == 1
    Job.objects.filter(pk=job.pk).update(priority_class_applied="experiment-protected")
    assert protection.protection_sweep(now=now) == {"jobs": 1, "changed": 0, "resent": 0}
    later = now + timedelta(minutes=11)
    assert protection.protection_sweep(now=later)["changed"] == 1
    job.refresh_from_db()
    assert job.priority_class == "experiment-running"


# -- Kueue (kubesim) chooses its victim by the classes ------------------------------------------


def _sweep_and_settle(capture, now):
    """One sweep, its label patches sent (as the worker would after commit), kubesim settled."""
    from kubesim.testing import settle_all

    with capture(execute=True):
        protection.protection_sweep(now=now)
    settle_all()


def test_kueue_spares_protected_jobs_then_reclaims_the_one_that_saved_last(
    sim_jobs, monkeypatch, client, django_capture_on_commit_callbacks
):
    """vision borrows 4 of nlp's A100s with three 4-GPU jobs; nlp wants them back. While the
    jobs are protected nothing is reclaimed; past the window, the job that saved most recently
    is the one Kueue preempts, and the portal records what it lost."""
    run_tasks_eagerly(monkeypatch)
    tier = _protect(sim_jobs["tiers"])
    cluster_reconcile(cluster_id=sim_jobs["cluster"].pk)
    jobs = []
    for name in ("first", "second", "third"):
        job = submit(sim_jobs, name=name, gpus_per_worker=4, tier="experiment",
                     expected_runtime_seconds=36000, max_runtime_seconds=86400)  # fmt: skip
        job_apply(job_id=job.pk)
        jobs.append(sync_until(job, S.RUNNING))
    assert [j.state for j in jobs] == [S.RUNNING] * 3
    now = timezone.now()
    _sweep_and_settle(django_capture_on_commit_callbacks, now)
    for job in jobs:
        job.refresh_from_db()
        assert job.priority_class == job.priority_class_applied == "experiment-protected"
    # Kueue took the label: the Workloads carry the protected class's priority.
    sim = sim_jobs["sim"]
    priorities = {
        wl["spec"]["priorityClassRef"]["name"]: wl["spec"]["priority"]
        for wl in sim.kube.list(
            "kueue.x-k8s.io/v1beta2", "Workload", namespace=jobs[0].team.namespace
        )  # fmt: skip
    }
    assert priorities == {"experiment-protected": 1091}

    reclaimer = submit(sim_jobs, name="mine-back", user="carol", team="nlp", gpus_per_worker=4,
                       tier="experiment", expected_runtime_seconds=36000,
                       max_runtime_seconds=86400)  # fmt: skip
    job_apply(job_id=reclaimer.pk)
    reclaimer = sync_until(reclaimer, S.QUEUED)
    for job in jobs:
        job.refresh_from_db()
        assert job.state == S.RUNNING, job.preemption_reason

    # The second job saves; ten minutes on, the protection is over.
    second = jobs[1]
    with django_capture_on_commit_callbacks(execute=True):
        protection.checkpoint_report(job=second, actor=sim_jobs["alice"], step=500)
    later = now + timedelta(minutes=tier.protection_minutes + 1)
    _sweep_and_settle(django_capture_on_commit_callbacks, later)
    classes = {j.name: Job.objects.get(pk=j.pk).priority_class for j in jobs}
    assert classes == {"first": "experiment-running", "second": "experiment-saved-15m",
                       "third": "experiment-running"}  # fmt: skip
    second = sync_until(second, S.PREEMPTED)
    assert second.state == S.PREEMPTED
    reclaimer = sync_until(reclaimer, S.RUNNING)
    assert reclaimer.state == S.RUNNING
    for job in (jobs[0], jobs[2]):
        job.refresh_from_db()
        assert job.state == S.RUNNING
    loss = JobPreemption.objects.get(job=second)
    assert loss.team == sim_jobs["vision"]
    assert loss.priority_class == "experiment-saved-15m"
    # Kueue stamps the preemption to the second; the checkpoint came before it.
    assert abs(loss.checkpoint_at - second.last_checkpoint_at) < timedelta(seconds=1)
    assert loss.checkpoint_at <= loss.at
    assert loss.gpus == 4
    assert loss.lost_gpu_seconds == 4 * int((loss.at - loss.checkpoint_at).total_seconds())
    # Preempted, the job waits under its tier's own class again.
    _sweep_and_settle(django_capture_on_commit_callbacks, later)
    second.refresh_from_db()
    assert second.priority_class == "" and second.priority_class_applied == ""
    # The job page explains it.
    client.force_login(sim_jobs["alice"])
    page = client.get(reverse("job-detail", args=[second.pk])).content.decode()
    assert "Chosen as a victim" in page and "because it saved" in page
    assert "experiment-saved-15m" in page
    # The first job's window, in real time, is not over (the sweeps above ran in the future).
    first_page = client.get(reverse("job-detail", args=[jobs[0].pk])).content.decode()
    assert "Protected from preemption until" in first_page


def test_a_job_reports_checkpoints_by_a_marker_in_its_log(
    sim_jobs, django_capture_on_commit_callbacks
):
    """The convention for a job that saves to its volume without calling the API: a
    "QM_CHECKPOINT step=<n> path=<p>" line in its log (kubesim's trainer writes one every
    KUBESIM_CHECKPOINT_EVERY steps). The portal records the newest once, at the line's time."""
    _protect(sim_jobs["tiers"])
    job = submit(sim_jobs, name="saves", gpus_per_worker=1, tier="experiment",
                 env={"KUBESIM_CHECKPOINT_EVERY": "5"}, expected_runtime_seconds=3000)  # fmt: skip
    job_apply(job_id=job.pk)
    job = sync_until(job, S.RUNNING)
    # The job keeps its checkpoints on a volume (the marker is only read for such jobs).
    Job.objects.filter(pk=job.pk).update(checkpoint_volume="checkpoints")
    assert protection.checkpoints_from_logs(job_ids=[job.pk]) == 0  # not yet 5 steps in
    sim_jobs["sim"].sim.clock.advance(12)
    with django_capture_on_commit_callbacks(execute=True):
        assert protection.checkpoints_from_logs(job_ids=[job.pk]) == 1
        assert protection.checkpoints_from_logs(job_ids=[job.pk]) == 0  # the same marker
    saved = JobCheckpoint.objects.get(job=job)
    assert saved.source == JobCheckpoint.Source.LOG and saved.step in (5, 10)
    assert saved.path == f"/checkpoints/step-{saved.step}"
    job.refresh_from_db()
    assert job.last_checkpoint_at == saved.at
    event = AuditEvent.objects.get(verb="job.checkpoint")
    assert event.actor is None and event.after["source"] == "log"


def test_the_api_tells_a_jobs_protection_to_who_sees_the_job(jw, api_as):
    _protect(jw["tiers"])
    job = _running(submit(jw, name="told"))
    url = reverse("api-job-protection", args=[job.pk])
    told = api_as(jw["alice"]).get(url)
    assert told.status_code == 200
    body = told.json()
    assert body["protected"] is True and body["protection_minutes"] == 10
    assert body["protected_until"] is not None and body["preemption"] is None
    assert api_as(jw["carol"]).get(url).status_code == 404
