"""Browser journey of member fair sharing: a department manager has a team share its queue
fairly among its members and weighs one; alice, who used the team's GPUs, then waits behind bob,
who asked later, and reads why on her job's page; the team page lists bob first."""

import pytest
from playwright.sync_api import expect

from kueuemodel.afs import AfsConfig
from queues.manifests.quotas import cluster_queue_name, member_queue_name
from queues.models import AuditEvent, Job, Quota
from queues.services.reconcile import cluster_check_drift
from tests.conftest import wait_until
from tests.factories import PASSWORD
from tests.queues.builders import run_tasks_eagerly, submit, sync_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_a_manager_shares_a_teams_queue_among_members_and_the_light_user_goes_first(
    page, login, sim_jobs_tx, monkeypatch
):
    w = sim_jobs_tx
    run_tasks_eagerly(monkeypatch)
    w["sim"].sim.controllers.kueue.set_admission_fair_sharing(
        AfsConfig(half_life=3600.0, sampling=1.0, weights={"cpu": 0.0, "memory": 0.0})
    )
    Quota.objects.filter(team=w["vision"]).update(borrowing_limit=0)

    login("maria", PASSWORD)
    page.goto("/teams/vision/")
    card = page.get_by_test_id("member-share")
    expect(card).to_contain_text("jobs wait in one queue")
    card.get_by_label("Share Vision's queue fairly among its members").check()
    card.get_by_label("bob").fill("2")
    card.get_by_role("button", name="Save").click()
    expect(page.locator(".messages")).to_contain_text("shares its queue fairly among its members")
    expect(card.get_by_label("bob")).to_have_value("2")
    live = w["sim"].kube.get(
        "kueue.x-k8s.io/v1beta2", "ClusterQueue", cluster_queue_name(w["vision"])
    )
    assert live["spec"]["admissionScope"] == {"admissionMode": "UsageBasedAdmissionFairSharing"}
    namespace = w["vision"].namespace

    def member_queue(user):
        name = member_queue_name(w["vision"], w[user])
        return w["sim"].kube.get("kueue.x-k8s.io/v1beta2", "LocalQueue", name, namespace)

    assert member_queue("bob")["spec"]["fairSharing"] == {"weight": "2"}
    assert AuditEvent.objects.get(verb="team.member_fair_sharing").actor == w["maria"]

    # alice fills the team's A100 quota, then alice and bob (later) both wait for it.
    w["vision"].refresh_from_db()
    first = submit(w, name="first", gpus_per_worker=8, expected_runtime_seconds=3)
    assert sync_until(first, Job.State.RUNNING).state == Job.State.RUNNING
    again = submit(w, name="again", gpus_per_worker=8)
    later = submit(w, user="bob", name="later", gpus_per_worker=8)
    assert sync_until(later, Job.State.RUNNING, timeout=30).state == Job.State.RUNNING
    assert Job.objects.get(pk=again.pk).state in (Job.State.QUEUED, Job.State.SUBMITTED)
    sync_until(again, Job.State.QUEUED)

    assert wait_until(lambda: (member_queue("alice").get("status") or {}).get("fairSharing"))
    cluster_check_drift(cluster_id=w["cluster"].pk)

    page.context.clear_cookies()
    login("alice", PASSWORD)
    page.goto(f"/jobs/{again.pk}/")
    expect(page.get_by_text("shares its queue fairly among its members").first).to_be_visible()
    page.goto("/teams/vision/")
    rows = page.get_by_test_id("member-share-table").locator("tbody tr")
    expect(rows.first).to_have_attribute("data-member", "bob")  # weighed 2, and used less
    expect(page.get_by_test_id("member-share")).not_to_contain_text("Save")  # alice may not
