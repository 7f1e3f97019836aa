"""Browser journey of fair sharing: a department manager sees on a team's page the share Kueue
reports for its borrowing, raises the team's weight, and sees the share fall once the weight
reaches the cluster."""

import pytest
from playwright.sync_api import expect

from queues.manifests.quotas import cluster_queue_name
from queues.models import AuditEvent, Job
from queues.selectors.fair_share import weighted_shares
from queues.services.reconcile import cluster_check_drift
from tests.conftest import wait_until
from tests.factories import PASSWORD
from tests.queues.builders import run_tasks_eagerly, submit, sync_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _share_becomes(w, value):
    def check():
        cluster_check_drift(cluster_id=w["cluster"].pk)
        return [s["share"] for s in weighted_shares(teams=[w["vision"]])[w["vision"].pk]] == [value]

    assert wait_until(check, timeout=15), weighted_shares(teams=[w["vision"]])


def test_a_manager_weighs_a_borrowing_team_and_sees_its_share_fall(
    page, login, sim_jobs_tx, monkeypatch
):
    w = sim_jobs_tx
    run_tasks_eagerly(monkeypatch)
    w["sim"].sim.controllers.kueue.fair_sharing = True
    # Vision holds its 8 A100s and borrows 2 of the department's idle GPUs.
    for name, gpus in [("own", 8), ("borrowed", 2)]:
        job = submit(w, name=name, gpus_per_worker=gpus)  # applied at once: tasks run eagerly
        assert sync_until(job, Job.State.RUNNING).state == Job.State.RUNNING
    _share_becomes(w, 125)

    login("maria", PASSWORD)
    page.goto("/teams/")
    page.get_by_role("link", name="Vision").click()
    card = page.get_by_test_id("fair-share")
    expect(card.get_by_test_id("fair-share-weight")).to_have_text("1")
    expect(card.get_by_test_id("fair-share-share")).to_have_text("125 on kubesim")
    expect(page.get_by_test_id("fair-share-peers")).to_contain_text("Language")
    card.get_by_label("Weight (0 to 100)").fill("2")
    card.get_by_role("button", name="Set the weight").click()
    expect(page.locator(".messages")).to_contain_text("Vision's fair-sharing weight is 2")
    expect(card.get_by_test_id("fair-share-weight")).to_have_text("2")
    live = w["sim"].kube.get(
        "kueue.x-k8s.io/v1beta2", "ClusterQueue", cluster_queue_name(w["vision"])
    )
    assert live["spec"]["fairSharing"] == {"weight": "2"}
    assert AuditEvent.objects.get(verb="team.fair_share_weight").actor == w["maria"]
    _share_becomes(w, 63)  # 62.5, which Kueue rounds up
    page.reload()
    expect(card.get_by_test_id("fair-share-share")).to_have_text("63 on kubesim")
