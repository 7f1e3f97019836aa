"""The what-if simulator: the recorded jobs replayed through kubesim's Kueue engine under today's
quotas and under a proposal; the replay of today's configuration reproduces what happened; a
proposal is checked entry by entry; applying it files the quota requests it implies."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.utils import timezone

from planning.models import WhatIfRun
from planning.services.whatif import whatif_compute, whatif_create
from queues.models import AuditEvent, Job, Quota, QuotaRequest
from tests.factories import JobFactory, JobPodFactory, TeamFactory
from tests.queues.builders import run_tasks_eagerly

HOUR = 3600


@pytest.fixture
def history(quota_world):
    """Vision (8 A100 of its own, may borrow 4: a ceiling of 12) submitted six 8-GPU jobs an
    hour apart, each running 2 h: they ran one at a time, as recorded here."""
    w = quota_world
    end = timezone.now()
    start = end - timedelta(days=1)
    tier = w["tiers"]["experiment"]
    for k in range(6):
        submitted = start + timedelta(hours=1 + k)
        started = start + timedelta(hours=1 + 2 * k)
        JobFactory(
            team=w["vision"], owner=w["alice"], tier=tier, pool=w["a100"], cluster=w["cluster"],
            workers=1, gpus_per_worker=8, state=Job.State.SUCCEEDED, submitted_at=submitted,
            started_at=started, finished_at=started + timedelta(hours=2),
            max_runtime_seconds=4 * HOUR,
        )  # fmt: skip
    return {**w, "end": end}


def test_todays_configuration_replays_what_happened_and_a_proposal_shortens_waits(history):
    w = history
    a100 = w["a100"]
    proposal = {"quotas": [{"team": w["vision"].pk, "pool": a100.pk, "nominal_gpus": 16,
                            "borrowing_limit": 4, "lending_limit": 2}]}  # fmt: skip
    result = whatif_compute(days=1, proposal=proposal, now=w["end"])
    today = result["today"]["teams"][str(w["vision"].pk)]
    proposed = result["proposal"]["teams"][str(w["vision"].pk)]
    assert result["jobs"] == 6
    # One at a time, as recorded: waits 0, 1, 2, 3, 4, 5 hours.
    assert today["wait_p50_seconds"] == today["actual_wait_p50_seconds"] == 2.5 * HOUR
    assert today["wait_p90_seconds"] == pytest.approx(4.5 * HOUR)
    # Twice the quota: two at a time, nobody waits.
    assert proposed["wait_p50_seconds"] == 0 and proposed["wait_p90_seconds"] == 0
    assert today["gpu_hours"] == proposed["gpu_hours"] == 6 * 2 * 8
    # Of its quota in every pool (8 A100 and 2 L4) over the day's 24 hours.
    assert today["utilisation_percent"] == round(100 * 96 / (10 * 24), 1)
    assert proposed["nominal_gpus"] == 18
    pool = result["proposal"]["pools"][str(a100.pk)]
    assert pool["gpus"] == 16 and pool["idle_gpu_hours"] == 16 * 24 - 96


def test_a_smaller_pool_or_a_lower_priority_shows_in_the_replay(history):
    w = history
    # The pool shrunk to 4 GPUs: no 8-GPU job can start at all in the window.
    shrunk = whatif_compute(days=1, proposal={"pool_sizes": [{"pool": w["a100"].pk, "gpus": 4}]},
                            now=w["end"])  # fmt: skip
    vision = shrunk["proposal"]["teams"][str(w["vision"].pk)]
    assert vision["gpu_hours"] == 0 and vision["wait_p50_seconds"] > 10 * HOUR


def test_nlp_reclaiming_its_quota_preempts_a_borrower_in_the_replay(history):
    w = history
    tier = w["tiers"]["experiment"]
    # vision runs 12 GPUs (8 its own, 4 borrowed from nlp); then nlp wants its 4 back.
    Job.objects.all().delete()
    start = w["end"] - timedelta(days=1)
    JobFactory(team=w["vision"], owner=w["alice"], tier=tier, pool=w["a100"],
               cluster=w["cluster"], workers=3, gpus_per_worker=4, state=Job.State.SUCCEEDED,
               submitted_at=start + timedelta(hours=1), started_at=start + timedelta(hours=1),
               finished_at=start + timedelta(hours=5))  # fmt: skip
    JobFactory(team=w["nlp"], owner=w["carol"], tier=tier, pool=w["a100"], cluster=w["cluster"],
               workers=1, gpus_per_worker=4, state=Job.State.SUCCEEDED,
               submitted_at=start + timedelta(hours=2), started_at=start + timedelta(hours=2),
               finished_at=start + timedelta(hours=3))  # fmt: skip
    # Today nlp lends 4 of its 4: when it wants them, Kueue reclaims them from the borrower.
    # Proposed: nlp holds 8 (the cohort then has 16), so vision's 12 never needed borrowing.
    result = whatif_compute(days=1, now=w["end"], proposal={"quotas": [
        {"team": w["nlp"].pk, "pool": w["a100"].pk, "nominal_gpus": 8,
         "borrowing_limit": None, "lending_limit": None}]})  # fmt: skip
    vision, nlp = str(w["vision"].pk), str(w["nlp"].pk)
    assert result["today"]["teams"][vision]["preempted"] == 1
    assert result["today"]["teams"][nlp]["wait_p50_seconds"] == 0
    assert result["proposal"]["teams"][vision]["preempted"] == 0
    assert result["proposal"]["teams"][nlp]["wait_p50_seconds"] == 0
    # The preempted job ran 1 h, then started over: 12 GPUs × (1 + 4) h instead of 4 h.
    assert result["today"]["teams"][vision]["gpu_hours"] == 12 * 5
    assert result["proposal"]["teams"][vision]["gpu_hours"] == 12 * 4


def test_a_preempted_job_replays_the_run_that_finished_not_the_time_since_its_first_start(
    history,
):
    w = history
    Job.objects.all().delete()
    start = w["end"] - timedelta(days=1)

    def at(hours):
        return start + timedelta(hours=hours)

    # Started at 1 h, preempted at 2 h, started over at 3 h and finished its 2 h run at 5 h.
    job = JobFactory(team=w["vision"], owner=w["alice"], tier=w["tiers"]["experiment"],
                     pool=w["a100"], cluster=w["cluster"], workers=1, gpus_per_worker=8,
                     state=Job.State.SUCCEEDED, submitted_at=at(1), started_at=at(1),
                     finished_at=at(5))  # fmt: skip
    JobPodFactory(job=job, gpus=8, started_at=at(1), finished_at=at(2))
    JobPodFactory(job=job, gpus=8, started_at=at(3), finished_at=at(5))
    result = whatif_compute(days=1, proposal={}, now=w["end"])
    vision = result["today"]["teams"][str(w["vision"].pk)]
    # Alone in the replay, it runs its 2 h once: 16 GPU-hours, not the 4 h since its first start.
    assert vision["gpu_hours"] == 8 * 2 and vision["wait_p50_seconds"] == 0


def test_a_proposal_is_checked_entry_by_entry(history):
    w = history
    with pytest.raises(PermissionDenied):
        whatif_create(actor=w["alice"], days=7)
    with pytest.raises(ValidationError) as exc:
        whatif_create(
            actor=w["maria"], days=90,
            quotas=[
                {"team": "vision", "pool": w["a100"].pk, "nominal_gpus": -1},
                {"team": "recsys", "pool": w["a100"].pk, "nominal_gpus": 4},
                {"team": "nlp", "pool": w["a100"].pk, "nominal_gpus": 2, "lending_limit": 3},
            ],
            tiers=[{"tier": "no-such-tier", "value": 5}],
        )  # fmt: skip
    errors = exc.value.message_dict
    assert "days" in errors
    assert "quotas[0].nominal_gpus" in errors
    assert errors["quotas[1].team"] == ["Name a team of a department you manage."]
    assert "quotas[2].lending_limit" in errors and "tiers[0].tier" in errors
    assert not WhatIfRun.objects.exists()


def test_a_manager_runs_a_proposal_and_applies_it(
    history, monkeypatch, api_as, django_capture_on_commit_callbacks
):
    w = history
    run_tasks_eagerly(monkeypatch)
    api = api_as(w["maria"])
    with django_capture_on_commit_callbacks(execute=True):
        made = api.post("/api/v1/whatif/", {
            "name": "double vision", "days": 1,
            "quotas": [{"team": "vision", "pool": w["a100"].pk, "nominal_gpus": 12,
                        "borrowing_limit": 4, "lending_limit": 2}],
        }, format="json")  # fmt: skip
    assert made.status_code == 201, made.json()
    run = WhatIfRun.objects.get()
    assert run.state == WhatIfRun.State.DONE
    body = api.get(f"/api/v1/whatif/{run.pk}/").json()
    assert body["state"] == "done" and body["result"]["jobs"] == 6
    assert api_as(w["pablo"]).get(f"/api/v1/whatif/{run.pk}/").status_code == 404
    applied = api_as(w["maria"]).post(f"/api/v1/whatif/{run.pk}/apply/")
    assert applied.status_code == 200
    request = QuotaRequest.objects.get()
    assert (request.team, request.pool, request.nominal_gpus) == (w["vision"], w["a100"], 12)
    assert request.state == QuotaRequest.State.PENDING and request.requested_by == w["maria"]
    assert f"What-if proposal #{run.pk}" in request.justification
    again = api_as(w["maria"]).post(f"/api/v1/whatif/{run.pk}/apply/")
    assert again.status_code == 400
    assert AuditEvent.objects.filter(verb="whatif.apply").count() == 1


def test_the_pages_are_for_managers_and_show_only_their_teams(history, client):
    w = history
    client.force_login(w["alice"])
    assert client.get("/quota/whatif/").status_code == 403
    client.force_login(w["pablo"])
    page = client.get("/quota/whatif/").content.decode()
    assert 'data-team="vision"' not in page  # Research's teams are not his to change
    client.force_login(w["maria"])
    page = client.get("/quota/whatif/").content.decode()
    assert 'data-team="vision" data-pool="a100"' in page
    field = f"nominal-{w['vision'].pk}-{w['a100'].pk}"
    bad = client.post("/quota/whatif/", {"days": "1", field: "lots"})
    assert bad.status_code == 400 and "Vision · a100 (nominal_gpus)" in bad.content.decode()
    run = WhatIfRun.objects.create(name="pablo's", created_by=w["pablo"])
    assert client.get(f"/quota/whatif/{run.pk}/").status_code == 404


def test_fair_sharing_weights_decide_which_borrower_goes_first_in_the_replay(history):
    w = history
    Job.objects.all().delete()
    start = w["end"] - timedelta(days=1)
    speech = TeamFactory(slug="speech", name="Speech", department=w["research"])
    Quota.objects.create(team=speech, pool=w["a100"], nominal_gpus=4)
    tier = w["tiers"]["experiment"]

    def ran(team, gpus, submitted, started, finished):
        JobFactory(team=team, owner=w["alice"], tier=tier, pool=w["a100"], cluster=w["cluster"],
                   workers=1, gpus_per_worker=gpus, state=Job.State.SUCCEEDED,
                   submitted_at=start + timedelta(hours=submitted),
                   started_at=start + timedelta(hours=started),
                   finished_at=start + timedelta(hours=finished))  # fmt: skip

    # The 16 A100s are full (vision 8, speech 4, nlp 4) until nlp's job ends at 3 h. Vision and
    # then speech ask to borrow 4 meanwhile: first come, first served, vision borrows first.
    ran(w["vision"], 8, 0.5, 0.5, 10)
    ran(speech, 4, 0.5, 0.5, 10)
    ran(w["nlp"], 4, 0.5, 0.5, 3)
    ran(w["vision"], 4, 2, 3, 5)
    ran(speech, 4, 2.02, 5, 7)
    vision, speech_id = str(w["vision"].pk), str(speech.pk)
    # With fair sharing and speech weighing twice as much, speech borrows first.
    result = whatif_compute(days=1, now=w["end"], proposal={
        "fair_sharing": True, "weights": [{"team": speech.pk, "weight": "2"}]})  # fmt: skip
    today, proposed = result["today"]["teams"], result["proposal"]["teams"]
    assert (result["today"]["fair_sharing"], result["proposal"]["fair_sharing"]) == (False, True)
    assert today[vision]["wait_p90_seconds"] < today[speech_id]["wait_p90_seconds"]
    assert proposed[speech_id]["wait_p90_seconds"] < proposed[vision]["wait_p90_seconds"]
    assert proposed[speech_id]["wait_p90_seconds"] < today[speech_id]["wait_p90_seconds"]
    # Fair sharing with equal weights keeps the order of arrival.
    equal = whatif_compute(days=1, now=w["end"], proposal={"fair_sharing": True})
    teams = equal["proposal"]["teams"]
    assert teams[vision]["wait_p90_seconds"] < teams[speech_id]["wait_p90_seconds"]


def test_a_proposals_weights_are_checked_and_applied_at_once(
    history, monkeypatch, api_as, django_capture_on_commit_callbacks
):
    w = history
    run_tasks_eagerly(monkeypatch)
    api = api_as(w["maria"])
    bad = api.post(
        "/api/v1/whatif/",
        {
            "days": 1,
            "fair_sharing": "sometimes",
            "weights": [{"team": "vision", "weight": "-1"}, {"team": "recsys", "weight": "2"}],
        },
        format="json",
    )
    assert bad.status_code == 400
    bad = api.post(
        "/api/v1/whatif/",
        {
            "days": 1,
            "weights": [{"team": "vision", "weight": "-1"}, {"team": "recsys", "weight": "2"}],
        },
        format="json",
    )
    assert bad.status_code == 400, bad.content
    errors = bad.json()
    assert "weights[0].weight" in errors and "weights[1].team" in errors  # recsys: not hers
    with django_capture_on_commit_callbacks(execute=True):
        made = api.post("/api/v1/whatif/", {"days": 1, "fair_sharing": True,
                                            "weights": [{"team": "vision", "weight": "3"}]},
                        format="json")  # fmt: skip
    assert made.status_code == 201, made.content
    run = WhatIfRun.objects.get()
    assert run.proposal["weights"] == [{"team": w["vision"].pk, "weight": "3"}]
    assert run.state == WhatIfRun.State.DONE and run.result["proposal"]["fair_sharing"] is True
    assert api.post(f"/api/v1/whatif/{run.pk}/apply/").status_code == 200
    w["vision"].refresh_from_db()
    assert w["vision"].fair_share_weight == 3
    assert AuditEvent.objects.get(verb="team.fair_share_weight").actor == w["maria"]
    assert not QuotaRequest.objects.exists()  # no quota changed


def test_the_what_if_form_takes_weights_and_fair_sharing(history, client):
    w = history
    client.force_login(w["maria"])
    page = client.get("/quota/whatif/").content.decode()
    assert f'name="weight-{w["vision"].pk}"' in page and 'name="fair_sharing"' in page
    bad = client.post("/quota/whatif/", {"days": "1", f"weight-{w['vision'].pk}": "200"})
    assert bad.status_code == 400
    assert "Vision (fair-sharing weight): Enter a weight from 0 to 100" in bad.content.decode()
    assert not WhatIfRun.objects.exists()
    made = client.post(
        "/quota/whatif/",
        {
            "days": "1",
            f"weight-{w['vision'].pk}": "2.5",
            f"weight-{w['nlp'].pk}": "1",
            "fair_sharing": "on",
        },
    )
    assert made.status_code == 302
    run = WhatIfRun.objects.get()  # nlp's weight is unchanged: not part of the proposal
    assert run.proposal["weights"] == [{"team": w["vision"].pk, "weight": "2.5"}]
    assert run.proposal["fair_sharing"] is True
    detail = client.get(f"/quota/whatif/{run.pk}/").content.decode()
    assert "Vision: fair-sharing weight 2.5" in detail and "Fair sharing on" in detail


def test_a_proposal_to_share_a_teams_queue_among_members_replays_it_and_applies_it(
    history, monkeypatch, django_capture_on_commit_callbacks
):
    """alice ran vision's six 2-hour jobs one after another; bob asked for one at 5:30. Today
    (one queue by age) bob waits behind alice's four jobs asked before his; shared among
    members, his job goes as soon as the running one ends, ahead of alice's older ones."""
    w = history
    start = w["end"] - timedelta(days=1)
    JobFactory(team=w["vision"], owner=w["bob"], tier=w["tiers"]["experiment"], pool=w["a100"],
               cluster=w["cluster"], workers=1, gpus_per_worker=8, state=Job.State.SUCCEEDED,
               submitted_at=start + timedelta(hours=5, minutes=30),
               started_at=start + timedelta(hours=11), finished_at=start + timedelta(hours=13),
               max_runtime_seconds=4 * HOUR)  # fmt: skip
    run_tasks_eagerly(monkeypatch)
    with pytest.raises(ValidationError) as exc:
        whatif_create(actor=w["maria"], member_fair_sharing=[
            {"team": "vision", "enabled": "yes"}, {"team": "recsys", "enabled": True}])  # fmt: skip
    assert exc.value.message_dict == {
        "member_fair_sharing[0].enabled": ["Give true or false."],
        "member_fair_sharing[1].team": ["Name a team of a department you manage."],
    }
    proposal = {"member_fair_sharing": [{"team": w["vision"].pk, "enabled": True}]}
    result = whatif_compute(days=1, proposal=proposal, now=w["end"])
    today = result["today"]["teams"][str(w["vision"].pk)]
    proposed = result["proposal"]["teams"][str(w["vision"].pk)]
    assert (today["member_fair_sharing"], proposed["member_fair_sharing"]) == (False, True)
    # Today bob's job starts when alice's fifth ends, at 11:00: 5.5 h after he asked.
    assert today["members"]["bob"] == {"jobs": 1, "wait_p50_seconds": 5.5 * HOUR,
                                       "wait_p90_seconds": 5.5 * HOUR}  # fmt: skip
    # Shared: when alice's third job ends at 7:00 bob, who used nothing, goes first.
    assert proposed["members"]["bob"]["wait_p50_seconds"] == 1.5 * HOUR
    assert proposed["members"]["alice"]["jobs"] == 6
    assert proposed["gpu_hours"] == today["gpu_hours"]
    # Applying the proposal turns it on (audited) and files no quota request.
    with django_capture_on_commit_callbacks(execute=True):
        run = whatif_create(actor=w["maria"], member_fair_sharing=[
            {"team": "vision", "enabled": True}])  # fmt: skip
    run.refresh_from_db()
    assert run.state == WhatIfRun.State.DONE, run.error
    from planning.services.whatif import whatif_apply

    assert whatif_apply(actor=w["maria"], run=run) == []
    w["vision"].refresh_from_db()
    assert w["vision"].member_fair_sharing
    assert AuditEvent.objects.filter(verb="team.member_fair_sharing", actor=w["maria"]).exists()
    assert AuditEvent.objects.get(verb="whatif.apply").after["member_fair_sharing"] == {
        "vision": True}  # fmt: skip


def test_the_what_if_form_shares_a_teams_queue_among_members(
    history, client, monkeypatch, django_capture_on_commit_callbacks
):
    w = history
    run_tasks_eagerly(monkeypatch)
    client.force_login(w["maria"])
    page = client.get("/quota/whatif/").content.decode()
    assert f'name="members-{w["vision"].pk}"' in page
    with django_capture_on_commit_callbacks(execute=True):
        made = client.post("/quota/whatif/", {"days": "1", "members-shown": "1",
                                              f"members-{w['vision'].pk}": "on"})  # fmt: skip
    assert made.status_code == 302
    run = WhatIfRun.objects.get()  # nlp stays as it is: not part of the proposal
    assert run.proposal["member_fair_sharing"] == [{"team": w["vision"].pk, "enabled": True}]
    detail = client.get(f"/quota/whatif/{run.pk}/").content.decode()
    assert "Vision shares its queue fairly among its members" in detail
    assert 'data-testid="whatif-members-vision"' in detail and 'data-member="alice"' in detail
    assert "in the proposal only" in detail


def test_what_ran_when_the_window_opened_holds_its_gpus_but_not_its_wait(history):
    """vision's 8-GPU job, started the day before, ran 3 h into the window: in the replay it
    holds its GPUs from the start, and the window's jobs wait for it as they did."""
    w = history
    start = w["end"] - timedelta(days=1)
    JobFactory(team=w["vision"], owner=w["bob"], tier=w["tiers"]["experiment"], pool=w["a100"],
               cluster=w["cluster"], workers=1, gpus_per_worker=8, state=Job.State.SUCCEEDED,
               submitted_at=start - timedelta(hours=5), started_at=start - timedelta(hours=4),
               finished_at=start + timedelta(hours=3),
               max_runtime_seconds=10 * HOUR)  # fmt: skip
    # A long-finished job and an abandoned one (ended before the window) are not carried.
    JobFactory(team=w["vision"], owner=w["bob"], tier=w["tiers"]["experiment"], pool=w["a100"],
               cluster=w["cluster"], state=Job.State.CANCELLED,
               submitted_at=start - timedelta(days=3))  # fmt: skip
    result = whatif_compute(days=1, proposal={}, now=w["end"])
    assert (result["jobs"], result["carried_over"]) == (6, 1)
    vision = result["today"]["teams"][str(w["vision"].pk)]
    assert vision["jobs"] == 6  # the carried job's wait is not the window's
    # alice's first job, asked at 1:00, now waits for the carried one to end at 3:00 (8 of
    # vision's 8 A100s, it may borrow 4: not enough for another 8) and so do the others.
    assert vision["wait_p50_seconds"] > 2.5 * HOUR
    # Its 3 h in the window count: 8 GPUs × (3 + 6 × 2) h.
    assert vision["gpu_hours"] == 8 * (3 + 12)


def test_a_job_preempted_and_waiting_at_the_end_replays_a_whole_run_not_its_cut_short_pod(
    history,
):
    """Started at 20:00, preempted at 21:00 (its pod Deleted) and waiting when the window ends
    at 24:00: the replay runs it for its expected 2 h, not for the 4 h since its pod started,
    nor for the hour its pod ran before it was stopped."""
    w = history
    Job.objects.all().delete()
    start = w["end"] - timedelta(days=1)
    job = JobFactory(team=w["vision"], owner=w["alice"], tier=w["tiers"]["experiment"],
                     pool=w["a100"], cluster=w["cluster"], workers=1, gpus_per_worker=8,
                     state=Job.State.PREEMPTED, submitted_at=start + timedelta(hours=20),
                     started_at=start + timedelta(hours=20),
                     expected_runtime_seconds=2 * HOUR)  # fmt: skip
    JobPodFactory(job=job, gpus=8, started_at=start + timedelta(hours=20),
                  finished_at=start + timedelta(hours=21), phase="Deleted")  # fmt: skip
    result = whatif_compute(days=1, proposal={}, now=w["end"])
    assert result["today"]["teams"][str(w["vision"].pk)]["gpu_hours"] == 8 * 2
    # Still running at the end instead: at least the 4 h so far.
    Job.objects.filter(pk=job.pk).update(state=Job.State.RUNNING)
    job.pods.update(finished_at=None, phase="Running")
    result = whatif_compute(days=1, proposal={}, now=w["end"])
    assert result["today"]["teams"][str(w["vision"].pk)]["gpu_hours"] == 8 * 4


def test_the_replays_side_by_side_give_the_figures_of_one_after_the_other(history, settings):
    w = history
    proposal = {"quotas": [{"team": w["vision"].pk, "pool": w["a100"].pk, "nominal_gpus": 16,
                            "borrowing_limit": 4, "lending_limit": 2}],
                "pool_sizes": [{"pool": w["a100"].pk, "gpus": 12}]}  # fmt: skip
    settings.WHATIF_PROCESSES = 1
    one_by_one = whatif_compute(days=1, proposal=proposal, now=w["end"])
    settings.WHATIF_PROCESSES = 2
    side_by_side = whatif_compute(days=1, proposal=proposal, now=w["end"])
    assert side_by_side == one_by_one
    vision = str(w["vision"].pk)
    assert side_by_side["today"]["teams"][vision] != side_by_side["proposal"]["teams"][vision]
