"""Kueue fair sharing per team: managers and admins set a team's weight, the portal renders it
into the team's ClusterQueue, shows the share Kueue reports and the team's decayed use, and
why-pending names fair sharing when a job must borrow."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.urls import reverse
from django.utils import timezone

from queues.manifests.quotas import cluster_queue_manifest, cluster_queue_name
from queues.models import AuditEvent, Job, ManagedObject, Quota
from queues.selectors.fair_share import decayed_gpu_hours, team_fair_share
from queues.selectors.jobs import pending_reason_text
from queues.services.fair_share import team_fair_share_set
from queues.services.jobs.apply import job_apply
from queues.services.reconcile import cluster_check_drift, cluster_reconcile
from tests.conftest import wait_until
from tests.factories import JobFactory, MembershipFactory, TeamFactory
from tests.queues.builders import submit, sync_until


def test_the_weight_is_rendered_only_when_it_is_not_kueues_default(quota_world):
    vision = quota_world["vision"]
    assert "fairSharing" not in cluster_queue_manifest(vision, [])["spec"]
    for weight, text in [("2", "2"), ("0.5", "0.5"), ("100", "100"), ("0", "0"), ("1.250", "1.25")]:
        vision.fair_share_weight = Decimal(weight)
        spec = cluster_queue_manifest(vision, [])["spec"]
        assert spec["fairSharing"] == {"weight": text}


def test_a_manager_sets_the_weight_through_the_api_and_it_is_audited(quota_world, api_as, api):
    url = "/api/v1/teams/vision/fair-share/"
    assert api_as(quota_world["alice"]).post(url, {"weight": "2"}).status_code == 403
    assert api_as(quota_world["bob"]).post(url, {"weight": "2"}).status_code == 403  # a lead
    assert api_as(quota_world["pablo"]).post(url, {"weight": "2"}).status_code == 404  # unseen
    api.logout()
    assert api.post(url, {"weight": "2"}).status_code in (401, 403)
    client = api_as(quota_world["maria"])
    for bad in ["", "abc", "-1", "101", "0.0001", "NaN"]:
        response = client.post(url, {"weight": bad}, format="json")
        assert response.status_code == 400 and "weight" in response.json(), (bad, response.content)
    assert not AuditEvent.objects.filter(verb="team.fair_share_weight").exists()
    done = client.post(url, {"weight": "2.5"}, format="json")
    assert done.status_code == 200, done.content
    assert Decimal(done.json()["fair_share_weight"]) == Decimal("2.5")
    event = AuditEvent.objects.get(verb="team.fair_share_weight")
    assert event.actor == quota_world["maria"] and event.team == quota_world["vision"]
    assert (event.before, event.after) == ({"fair_share_weight": "1"}, {"fair_share_weight": "2.5"})
    client.post(url, {"weight": "2.500"}, format="json")  # the same weight: nothing to record
    assert AuditEvent.objects.filter(verb="team.fair_share_weight").count() == 1
    listed = api_as(quota_world["alice"]).get("/api/v1/teams/vision/").json()
    assert Decimal(listed["fair_share_weight"]) == Decimal("2.5")


@pytest.mark.parametrize("who", ["alice", "bob", "carol", "pablo", "frank"])
def test_only_admins_and_the_departments_managers_may_set_it(quota_world, who):
    with pytest.raises(PermissionDenied):
        team_fair_share_set(actor=quota_world[who], team=quota_world["vision"], weight="3")
    team = team_fair_share_set(actor=quota_world["admin"], team=quota_world["vision"], weight="3")
    assert team.fair_share_weight == 3


def test_the_service_says_what_to_fix(quota_world):
    with pytest.raises(ValidationError) as exc:
        team_fair_share_set(actor=quota_world["maria"], team=quota_world["vision"], weight="-2")
    assert exc.value.message_dict == {"weight": ["Enter a weight from 0 to 100; 1 is the default."]}


def test_from_the_team_page(quota_world, client):
    client.force_login(quota_world["maria"])
    url = reverse("team-fair-share", args=["vision"])
    page = client.post(url, {"weight": "lots"}, follow=True).content.decode()
    assert "Enter a number, e.g. 2 or 0.5." in page
    client.post(url, {"weight": "0.5"})
    quota_world["vision"].refresh_from_db()
    assert quota_world["vision"].fair_share_weight == Decimal("0.5")
    html = client.get(reverse("team-detail", args=["vision"])).content.decode()
    assert 'data-testid="fair-share-peers"' in html and "Set the weight" in html
    assert "Language" in html  # nlp, the other team of her department
    client.force_login(quota_world["alice"])
    html = client.get(reverse("team-detail", args=["vision"])).content.decode()
    assert '<dd data-testid="fair-share-weight">0.5</dd>' in html
    assert "Set the weight" not in html and 'data-testid="fair-share-peers"' not in html
    assert client.post(url, {"weight": "9"}).status_code == 403
    quota_world["vision"].refresh_from_db()
    assert quota_world["vision"].fair_share_weight == Decimal("0.5")
    client.force_login(quota_world["pablo"])
    assert client.post(url, {"weight": "9"}).status_code == 404


def _ran(team, *, gpus, start, end):
    return JobFactory(
        team=team,
        gpus_per_worker=gpus,
        state=Job.State.SUCCEEDED if end else Job.State.RUNNING,
        started_at=start,
        finished_at=end,
    )


def test_decayed_use_halves_every_half_life(quota_world):
    vision = quota_world["vision"]
    now = timezone.now().replace(microsecond=0)
    # 2 GPUs for the last 6 minutes (0.2 GPU-hours), 4 GPUs for 6 minutes two hours ago.
    _ran(vision, gpus=2, start=now - timedelta(minutes=6), end=None)
    _ran(vision, gpus=4, start=now - timedelta(hours=2, minutes=6), end=now - timedelta(hours=2))
    _ran(vision, gpus=8, start=now - timedelta(days=30), end=now - timedelta(days=29))  # too old
    raw = decayed_gpu_hours(teams=[vision], now=now, half_life_hours=1e9)[vision.pk]
    assert raw == pytest.approx(0.2 + 0.4 + 8 * 24, rel=1e-6)
    # With a one-hour half-life the run two hours ago counts a quarter, the month-old one nothing.
    decayed = decayed_gpu_hours(teams=[vision], now=now, half_life_hours=1)[vision.pk]
    # Each run's mid-point is 3 minutes (0.05 h) older than its end: 2 ** -0.05 = 0.966.
    assert decayed == pytest.approx(0.2 * 0.966 + 0.4 * 0.25 * 0.966, rel=2e-3)


def test_why_pending_names_fair_sharing_only_when_kueue_reports_shares(jw):
    vision, nlp = jw["vision"], jw["nlp"]
    job = submit(jw, name="big", gpus_per_worker=5, workers=2)  # beyond vision's 8 A100s
    text = pending_reason_text(job=job, message="")
    assert "fair sharing" not in text
    for team, share in [(vision, 250), (nlp, 40)]:
        ManagedObject.objects.create(
            cluster=jw["cluster"], api_version="kueue.x-k8s.io/v1beta2", kind="ClusterQueue",
            name=team.slug, owner_type="team", owner_id=team.pk,
            live_status={"fairSharing": {"weightedShare": share}},
        )  # fmt: skip
    vision.fair_share_weight = Decimal(2)
    vision.save()
    text = pending_reason_text(job=job, message="")
    assert "fair sharing decides who borrows" in text
    assert "weighted share is 250 (weight 2)" in text
    assert "the lowest of the department's other teams is 40" in text
    assert "Language" not in text  # the other team's figure, not its name
    small = submit(jw, name="small", gpus_per_worker=1)  # fits vision's own quota
    assert "fair sharing" not in pending_reason_text(job=small, message="")


def test_the_weight_reaches_kueue_and_the_team_sees_the_share_it_reports(sim_jobs, client):
    sim = sim_jobs["sim"]
    sim.sim.controllers.kueue.fair_sharing = True
    team_fair_share_set(actor=sim_jobs["maria"], team=sim_jobs["vision"], weight="2")
    cluster_reconcile(cluster_id=sim_jobs["cluster"].pk)
    name = cluster_queue_name(sim_jobs["vision"])
    live = sim.kube.get("kueue.x-k8s.io/v1beta2", "ClusterQueue", name)
    assert live["spec"]["fairSharing"] == {"weight": "2"}
    # Vision fills its 8 A100s and borrows 2 more.
    jobs = [
        submit(sim_jobs, name="own", gpus_per_worker=8),
        submit(sim_jobs, name="borrowed", gpus_per_worker=2),
    ]
    for job in jobs:
        assert job_apply(job_id=job.pk) == "applied"
    for job in jobs:
        assert sync_until(job, Job.State.RUNNING).state == Job.State.RUNNING

    def shares():
        cluster_check_drift(cluster_id=sim_jobs["cluster"].pk)
        return [s["share"] for s in team_fair_share(team=sim_jobs["vision"])["shares"]]

    # Kueue counts a resource over all flavors: 2 borrowed GPUs per 16 the cohort can lend (8 +
    # 4 of vision's, 4 of nlp's) is 125 per thousand; weight 2 halves it, and Kueue reports
    # the share rounded up.
    assert wait_until(lambda: shares() == [63], timeout=10), shares()
    card = team_fair_share(team=sim_jobs["vision"])
    assert card["enabled"] and [s["share"] for s in card["shares"]] == [63]
    assert card["decayed_gpu_hours"] > 0
    client.force_login(sim_jobs["alice"])
    html = client.get(reverse("team-detail", args=["vision"])).content.decode()
    assert '<dd data-testid="fair-share-share">63 on kubesim</dd>' in html
    sim_jobs["vision"].refresh_from_db()
    waiting = submit(sim_jobs, name="more", gpus_per_worker=4)
    assert "weighted share is 63 (weight 2)" in pending_reason_text(job=waiting, message="")


def test_a_borrower_above_its_fair_share_is_preempted_for_one_below_it(sim_jobs):
    w = {**sim_jobs}
    w["sim"].sim.controllers.kueue.fair_sharing = True
    w["speech"] = TeamFactory(slug="speech", name="Speech", department=w["research"])
    MembershipFactory(user=w["carol"], team=w["speech"])
    Quota.objects.create(team=w["speech"], pool=w["pools"]["a100"], nominal_gpus=4)
    Quota.objects.filter(team=w["nlp"]).update(borrowing_limit=None)
    cluster_reconcile(cluster_id=w["cluster"].pk)

    def run(team, name):
        job = submit(w, user="carol", team=team, name=name, gpus_per_worker=4)
        assert job_apply(job_id=job.pk) == "applied"
        return job

    # nlp runs its own 4 A100s and borrows 8 of vision's idle ones; speech runs its own 4.
    borrowers = [run("nlp", f"nlp-{i}") for i in range(3)]
    own = run("speech", "speech-own")
    for job in [*borrowers, own]:
        assert sync_until(job, Job.State.RUNNING).state == Job.State.RUNNING
    # Speech now borrows too: nlp, far above it in share, gives up one job to it.
    wanted = run("speech", "speech-borrows")
    assert sync_until(wanted, Job.State.RUNNING).state == Job.State.RUNNING
    for job in borrowers:
        job.refresh_from_db()
    preempted = [j for j in borrowers if j.state == Job.State.PREEMPTED]
    assert len(preempted) == 1, [(j.name, j.state) for j in borrowers]
    assert "speech-borrows" in preempted[0].preemption_reason
    assert "more than its fair share" in preempted[0].preemption_reason


def test_the_team_page_reads_the_runs_for_decayed_use_once_in_a_while(quota_world):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    vision = quota_world["vision"]
    _ran(vision, gpus=2, start=timezone.now() - timedelta(hours=1), end=None)

    def job_queries():
        with CaptureQueriesContext(connection) as ctx:
            card = team_fair_share(team=vision)
        return card, [q for q in ctx.captured_queries if '"queues_job"' in q["sql"]]

    first, read = job_queries()
    # 2 GPUs for the last hour, weighed at its mid-point half an hour ago: 2 * 2 ** (-0.5 / 168).
    assert first["decayed_gpu_hours"] == pytest.approx(2 * 0.99794, rel=1e-4) and read
    again, read = job_queries()  # cached for a few minutes: the runs are not read again
    assert again["decayed_gpu_hours"] == first["decayed_gpu_hours"] and not read
