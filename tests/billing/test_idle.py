"""Idle-GPU accountability against kubesim: a running job whose GPUs its DCGM exporter reports
idle is flagged from the direct scrape, its owner and lead are warned after the tier's
duration, and after the grace period the tier's policy suspends it through Kueue (the Workload
inactive, its pods gone) until the owner resumes it; busy jobs and stale data are left alone;
idle GPU-hours are reported per team and per user."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from billing import dcgm
from billing.models import ScrapeState
from billing.services.idle import idle_enforce, idle_observe
from billing.services.usage import usage_scrape_record
from queues.manifests.quotas import kueue_api_version
from queues.models import AuditEvent, Job, PriorityTier
from queues.services.jobs.apply import job_apply
from queues.services.jobs.idle import job_idle_resume
from queues.services.jobs.recording import SUSPENDED_TEXT
from tests.queues.builders import run_tasks_eagerly, sim_jobs_setup, submit, sync_until

IDLE_ENV = {"KUBESIM_GPU_UTIL": "0"}


@pytest.fixture
def sim_jobs(world, sim_cluster_synced, monkeypatch):
    run_tasks_eagerly(monkeypatch)  # the e-mails and webhooks are sent in-process
    w = sim_jobs_setup(world, sim_cluster_synced)
    PriorityTier.objects.filter(name="experiment").update(
        idle_threshold_percent=5, idle_after_minutes=10, idle_grace_minutes=15,
        idle_action="suspend",
    )  # fmt: skip
    world["bob"].email = "bob@example.org"
    world["bob"].save()
    world["alice"].email = "alice@example.org"
    world["alice"].save()
    return w


def _scrape(w, at=None):
    url = f"{w['sim'].sim.url}/metrics/dcgm"
    samples = dcgm.scrape(url)
    at = at or timezone.now()
    usage_scrape_record(cluster=w["cluster"], url=url, samples=samples, scraped_at=at)
    return idle_observe(cluster=w["cluster"], samples=samples, scraped_at=at)


def _later(w, t0, minutes):
    """Time passes with the scrapes going on (every exporter read again at that moment)."""
    at = t0 + timedelta(minutes=minutes)
    _scrape(w, at)
    return at


def _workload(w, job):
    kube = w["sim"].kube
    return kube.get(kueue_api_version(w["cluster"]), "Workload", job.workload_name,
                    job.team.namespace)  # fmt: skip


def test_an_idle_job_is_warned_then_suspended_and_its_owner_resumes_it(
    sim_jobs, mailoutbox, django_capture_on_commit_callbacks
):
    w = sim_jobs
    idle = submit(w, name="notebook", env=IDLE_ENV, expected_runtime_seconds=3600)
    busy = submit(w, name="train", user="bob", expected_runtime_seconds=3600)
    for job in (idle, busy):
        job_apply(job_id=job.pk)
    idle, busy = sync_until(idle, "running"), sync_until(busy, "running")
    assert idle.state == busy.state == "running"
    t0 = timezone.now()
    assert _scrape(w, t0) == 1
    idle.refresh_from_db()
    busy.refresh_from_db()
    assert idle.idle_since == t0 and idle.idle_util == 0
    assert busy.idle_since is None and busy.idle_util > 50

    # Before the tier's 10 minutes nothing happens; at 10 minutes owner and lead are told.
    assert idle_enforce(now=_later(w, t0, 9)) == {"warned": 0, "suspended": 0}
    with django_capture_on_commit_callbacks(execute=True):
        assert idle_enforce(now=_later(w, t0, 10)) == {"warned": 1, "suspended": 0}
    assert idle_enforce(now=_later(w, t0, 11))["warned"] == 0  # once
    warning = [m for m in mailoutbox if "GPUs idle" in m.subject]
    assert len(warning) == 1
    assert set(warning[0].to) == {"alice@example.org", "bob@example.org"}
    assert "suspended in 15 min" in warning[0].body
    assert AuditEvent.objects.filter(verb="job.idle_warn", object_id=str(idle.pk)).exists()

    # The grace runs from the warning: at 10 + 15 minutes the policy suspends it in Kueue.
    with django_capture_on_commit_callbacks(execute=True):
        result = idle_enforce(now=_later(w, t0, 25))
    assert result == {"warned": 0, "suspended": 1}
    idle.refresh_from_db()
    assert _workload(w, idle)["spec"]["active"] is False
    idle = sync_until(idle, "queued")
    assert idle.state == "queued" and idle.pending_reason == SUSPENDED_TEXT
    assert idle.estimated_start is None
    busy.refresh_from_db()
    assert busy.state == "running"  # only the idle job pays
    assert AuditEvent.objects.filter(verb="job.idle_suspend", object_id=str(idle.pk)).exists()
    assert any("suspended" in m.subject for m in mailoutbox)

    # carol (another team) may not resume it; alice (its owner) does, and it runs again.
    from django.core.exceptions import PermissionDenied

    with pytest.raises(PermissionDenied):
        job_idle_resume(job=idle, user=w["carol"])
    job_idle_resume(job=idle, user=w["alice"])
    assert _workload(w, idle)["spec"]["active"] is True
    idle = sync_until(idle, "running")
    assert idle.state == "running"
    assert idle.idle_suspended_at is None and idle.idle_warned_at is None
    assert AuditEvent.objects.get(verb="job.idle_resume").actor == w["alice"]


def test_a_busy_scrape_clears_the_idle_flag_and_its_warning(sim_jobs):
    w = sim_jobs
    job = submit(w, name="notebook", env=IDLE_ENV, expected_runtime_seconds=3600)
    job_apply(job_id=job.pk)
    job = sync_until(job, "running")
    t0 = timezone.now()
    _scrape(w, t0)
    idle_enforce(now=_later(w, t0, 10))
    job.refresh_from_db()
    assert job.idle_warned_at is not None
    # The job starts using its GPUs (its tier's threshold rises above what it does): cleared.
    PriorityTier.objects.filter(name="experiment").update(idle_threshold_percent=0)
    _scrape(w, t0 + timedelta(minutes=11))
    job.refresh_from_db()
    assert job.idle_since is None and job.idle_warned_at is None
    assert idle_enforce(now=_later(w, t0, 40)) == {"warned": 0, "suspended": 0}


def test_warn_only_tiers_never_suspend_and_stale_scrapes_decide_nothing(sim_jobs):
    w = sim_jobs
    PriorityTier.objects.filter(name="experiment").update(idle_action="warn")
    job = submit(w, name="notebook", env=IDLE_ENV, expected_runtime_seconds=3600)
    job_apply(job_id=job.pk)
    job = sync_until(job, "running")
    t0 = timezone.now()
    _scrape(w, t0)
    # No scrape since t0 (the exporter stopped answering): at 10 minutes the flag is stale.
    assert idle_enforce(now=t0 + timedelta(minutes=10))["warned"] == 0
    assert ScrapeState.objects.get().last_scrape_at == t0
    assert idle_enforce(now=_later(w, t0, 11))["warned"] == 1
    assert idle_enforce(now=_later(w, t0, 180)) == {"warned": 0, "suspended": 0}
    job.refresh_from_db()
    assert job.idle_suspended_at is None


def test_a_cluster_metered_through_prometheus_is_watched_live(sim_jobs, settings):
    """No direct scrape: the beat task asks the cluster's Prometheus (which scrapes kubesim's
    exporter) for the last two minutes; the idle job is flagged, the busy one is not, and a
    Prometheus that stops answering leaves the cluster alone after a while."""
    import time
    from datetime import UTC, datetime

    from billing.models import IdleWatchState
    from billing.services.idle import idle_watch_prometheus
    from billing.tasks import enforce_idle
    from tests.billing.prom import prometheus_available, running_prometheus

    if not prometheus_available():
        pytest.fail("prometheus is missing: run `make test`, which installs it")
    w = sim_jobs
    idle = submit(w, name="notebook", env=IDLE_ENV, expected_runtime_seconds=3600)
    busy = submit(w, name="train", user="bob", expected_runtime_seconds=3600)
    for job in (idle, busy):
        job_apply(job_id=job.pk)
    idle, busy = sync_until(idle, "running"), sync_until(busy, "running")
    host = w["sim"].sim.url.split("//", 1)[1]
    with running_prometheus(targets=[host], interval="1s") as url:
        client = dcgm.Prometheus(base_url=url)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not client.query(
            f'{dcgm.UTIL}{{pod!=""}}', datetime.now(UTC)
        ):
            time.sleep(0.5)
        settings.PROMETHEUS_URL, settings.BILLING_SOURCE = url, "prometheus"
        enforce_idle()  # as beat runs it: the Prometheus look, then the policy
        t0 = IdleWatchState.objects.get(cluster=w["cluster"]).observed_at
    idle.refresh_from_db()
    busy.refresh_from_db()
    assert idle.idle_since == t0 and idle.idle_util == 0
    assert busy.idle_since is None and busy.idle_util > 50
    assert idle_enforce(now=t0 + timedelta(minutes=4)) == {"warned": 0, "suspended": 0}
    # Prometheus is gone: the look fails and is recorded; after a while nothing is decided.
    assert idle_watch_prometheus(cluster=w["cluster"], url=url) == 0
    state = IdleWatchState.objects.get(cluster=w["cluster"])
    assert state.observed_at == t0 and "unreachable" in state.last_error
    assert idle_enforce(now=t0 + timedelta(minutes=10)) == {"warned": 0, "suspended": 0}


def test_the_job_page_shows_the_banner_and_the_resume_button(sim_jobs, client):
    w = sim_jobs
    job = submit(w, name="notebook", env=IDLE_ENV, expected_runtime_seconds=3600)
    job_apply(job_id=job.pk)
    job = sync_until(job, "running")
    t0 = timezone.now()
    _scrape(w, t0)
    client.force_login(w["alice"])
    body = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "Its GPUs are idle" in body and "below the 5 %" in body
    idle_enforce(now=_later(w, t0, 10))
    idle_enforce(now=_later(w, t0, 25))
    job.refresh_from_db()
    assert job.idle_suspended_at is not None
    body = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "Suspended because its GPUs were idle" in body and "Resume job" in body
    client.force_login(w["carol"])
    assert client.post(f"/jobs/{job.pk}/resume/").status_code == 404  # not her team's job
    client.force_login(w["alice"])
    client.post(f"/jobs/{job.pk}/resume/")
    job.refresh_from_db()
    assert job.idle_suspended_at is None


def test_resume_api_answers_for_suspended_jobs_only(sim_jobs, api_as):
    w = sim_jobs
    job = submit(w, name="notebook", env=IDLE_ENV, expected_runtime_seconds=3600)
    job_apply(job_id=job.pk)
    job = sync_until(job, "running")
    not_suspended = api_as(w["alice"]).post(f"/api/v1/jobs/{job.pk}/resume/")
    assert not_suspended.status_code == 400
    t0 = timezone.now()
    _scrape(w, t0)
    idle_enforce(now=_later(w, t0, 10))
    idle_enforce(now=_later(w, t0, 25))
    body = api_as(w["alice"]).get(f"/api/v1/jobs/{job.pk}/").json()
    assert body["idle_suspended_at"] is not None and body["idle_util"] == 0
    resumed = api_as(w["alice"]).post(f"/api/v1/jobs/{job.pk}/resume/")
    assert resumed.status_code == 200 and resumed.json()["idle_suspended_at"] is None
    assert Job.objects.get(pk=job.pk).idle_suspended_at is None


def test_idle_gpu_hours_are_reported_per_team_and_user_at_their_price(world, api_as, client):
    from datetime import UTC, datetime

    from billing.models import UsageHour
    from fleet.models import Cluster, GpuModel
    from tests.billing.conftest import make_job, make_price

    cluster = Cluster.objects.create(name="prod", kubeconfig_path="/dev/null", is_default=True)
    a100 = GpuModel.objects.create(name="A100", dcgm_model_names=["NVIDIA A100"])
    make_price(a100, "3.0000")
    month = datetime(2026, 10, 1, tzinfo=UTC)
    alice_job = make_job(world["vision"], world["alice"], name="nb", pod="nb-0")
    bob_job = make_job(world["vision"], world["bob"], name="train", pod="train-0")
    carol_job = make_job(world["nlp"], world["carol"], name="eval", pod="eval-0")
    PriorityTier.objects.filter(name="experiment").update(idle_threshold_percent=10)
    plan = [  # job, hours, util
        (alice_job, 3, 2.0),  # idle: 3 GPU-h
        (bob_job, 2, 60.0),  # busy
        (bob_job, 1, 9.9),  # idle: 1 GPU-h (just under the threshold)
        (carol_job, 2, 0.0),  # idle, another team
    ]
    h = 0
    for job, hours, util in plan:
        for _ in range(hours):
            UsageHour.objects.create(
                hour=month + timedelta(hours=h), cluster=cluster, gpu_uuid=f"GPU-{job.pk}",
                pod=job.pods.get().name, namespace=job.team.namespace, team=job.team, job=job,
                gpu_model=a100, model_name="A100", seconds_allocated=3600, util_mean=util,
                sample_count=120, expected_samples=120,
            )  # fmt: skip
            h += 1
    body = api_as(world["frank"]).get("/api/v1/billing/idle/?month=2026-10").json()
    assert {r["team"]: (r["gpu_hours_idle"], r["cost"]) for r in body["teams"]} == {
        "vision": ("4.0000", "12.00"),
        "nlp": ("2.0000", "6.00"),
    }
    users = {r["user"]: (r["gpu_hours_idle"], r["jobs"]) for r in body["users"]}
    assert users == {"alice": ("3.0000", 1), "bob": ("1.0000", 1), "carol": ("2.0000", 1)}
    assert body["totals"] == {"gpu_hours_idle": "6.0000", "cost": "18.00"}
    # A member sees their team only; so does the page.
    mine = api_as(world["carol"]).get("/api/v1/billing/idle/?month=2026-10").json()
    assert [r["team"] for r in mine["teams"]] == ["nlp"]
    assert {r["user"] for r in mine["users"]} == {"carol"}
    client.force_login(world["alice"])
    page = client.get("/billing/idle/?month=2026-10").content.decode()
    assert 'data-user="alice"' in page and 'data-user="carol"' not in page
    assert api_as(world["frank"]).get("/api/v1/billing/idle/?month=10-2026").status_code == 400
