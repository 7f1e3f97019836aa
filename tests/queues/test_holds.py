"""Holding a team's queues by hand: platform admins and the department's managers, with a reason
the team sees, audited; a budget never lifts a hold it did not place."""

import pytest
from django.urls import reverse

from queues.models import AuditEvent
from queues.services.holds import team_hold, team_queue_hold, team_release


def test_manager_holds_and_releases_through_the_api(quota_world, api_as, api):
    vision = quota_world["vision"]
    url = f"/api/v1/teams/{vision.slug}/hold/"
    assert api_as(quota_world["alice"]).post(url, {"reason": "x"}).status_code == 403
    api.logout()
    assert api_as(quota_world["pablo"]).post(url, {"reason": "x"}).status_code == 404  # unseen
    api.logout()
    client = api_as(quota_world["maria"])
    missing = client.post(url, {"reason": ""}, format="json")
    assert missing.status_code == 400 and "reason" in missing.json()
    held = client.post(url, {"reason": "Cluster maintenance until Friday"}, format="json")
    assert held.status_code == 200, held.content
    reason = held.json()["queue_hold_reason"]
    assert reason == "Held by maria: Cluster maintenance until Friday"
    event = AuditEvent.objects.get(verb="team.queue_hold")
    assert event.actor == quota_world["maria"] and event.after == {"queue_hold_reason": reason}
    released = client.post(f"/api/v1/teams/{vision.slug}/release/")
    assert released.status_code == 200 and released.json()["queue_hold_reason"] == ""
    again = client.post(f"/api/v1/teams/{vision.slug}/release/")
    assert again.status_code == 400


def test_the_team_sees_why_its_queues_are_held(quota_world, client):
    team_hold(actor=quota_world["admin"], team=quota_world["vision"], reason="Audit of costs")
    client.force_login(quota_world["alice"])
    html = client.get(reverse("team-detail", args=["vision"])).content.decode()
    assert "The team's queues are held" in html and "Held by admin: Audit of costs" in html
    assert "Hold the queues" not in html and "Release the queues" not in html  # not hers


def test_hold_and_release_from_the_team_page(quota_world, client):
    client.force_login(quota_world["maria"])
    url = reverse("team-hold", args=["vision"])
    client.post(url, {"reason": "Quota review", "hold": ""})
    quota_world["vision"].refresh_from_db()
    assert quota_world["vision"].queue_hold_reason == "Held by maria: Quota review"
    html = client.get(reverse("team-detail", args=["vision"])).content.decode()
    assert "Release the queues" in html
    client.post(url, {"release": ""})
    quota_world["vision"].refresh_from_db()
    assert quota_world["vision"].queue_hold_reason == ""


@pytest.mark.parametrize("who", ["alice", "bob", "frank"])
def test_others_may_not_hold(quota_world, who):
    from django.core.exceptions import PermissionDenied

    with pytest.raises(PermissionDenied):
        team_hold(actor=quota_world[who], team=quota_world["vision"], reason="no")
    team_queue_hold(team=quota_world["vision"], reason="Held by admin: x", actor=None)
    with pytest.raises(PermissionDenied):
        team_release(actor=quota_world[who], team=quota_world["vision"])


def test_a_held_teams_waiting_job_says_so_with_who_can_release_and_no_estimate(sim_jobs):
    from queues.services.jobs.apply import job_apply
    from queues.services.jobs.sync import jobs_sync_cluster
    from queues.services.reconcile import cluster_reconcile
    from tests.queues.builders import submit

    team = sim_jobs["vision"]
    team.department.managers.add(sim_jobs["maria"])
    team.queue_hold_reason = "Budget for November 2026 spent (100 EUR)."
    team.save()
    cluster_reconcile(cluster_id=sim_jobs["cluster"].pk)
    job = submit(sim_jobs, name="held back", gpus_per_worker=1)
    assert job_apply(job_id=job.pk) == "applied"
    jobs_sync_cluster(cluster=job.cluster)
    jobs_sync_cluster(cluster=job.cluster)
    job.refresh_from_db()
    assert job.state == "queued"
    assert job.pending_reason.startswith("Your team's queue is held: Budget for November 2026")
    assert "Who can release it: maria (managing Research) or a platform admin" in (
        job.pending_reason
    )
    assert job.estimated_start is None
    assert job.estimate_basis == "No estimate while the team's queue is held."
