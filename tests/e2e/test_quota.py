"""Quota journeys in Chromium: a lead asks, the manager approves, kubesim's ClusterQueue follows."""

import datetime as dt

import pytest
from django.utils import timezone
from kubernetes import client as k8s
from playwright.sync_api import expect

from queues import tasks
from queues.models import Quota, QuotaRequest
from tests.factories import PASSWORD
from tests.queues.builders import make_tiers

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _nominal_in_kubesim(sim, team="vision") -> int | None:
    api = k8s.CustomObjectsApi(sim.api_client)
    cq = api.get_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "clusterqueues", f"qm-{team}")
    flavors = cq["spec"]["resourceGroups"][0]["flavors"]
    a100 = next(f for f in flavors if f["name"] == "a100")
    return int(a100["resources"][-1]["nominalQuota"])


def _reload_until(page, locator, text, tries=60):
    for _ in range(tries):
        if text in locator.inner_text():
            return
        page.wait_for_timeout(500)
        page.reload()
    expect(locator).to_contain_text(text)


def _nav(page, name):
    page.get_by_role("navigation", name="Main").get_by_role("link", name=name).click()


def _logout(page):
    page.get_by_role("button", name="Log out").click()


def _file_request(page, *, nominal: str, ends_at: str = ""):
    _nav(page, "Quota")
    page.get_by_role("link", name="Request quota").click()
    # 16 GPUs, the 4 granted are vision's own: all 16 can be vision's, the figure the
    # manager's decision page shows as capacity left for the team.
    expect(page.get_by_test_id("left-a100")).to_contain_text("16")
    page.get_by_label("Team").select_option(label="Vision")
    page.get_by_label("Pool", exact=True).select_option(label="a100")
    page.get_by_label("Nominal GPUs").fill(nominal)
    # htmx refreshes the pool's figures and the price as the lead types.
    expect(page.get_by_test_id("figures")).to_contain_text("Vision's quota in a100")
    expect(page.get_by_test_id("figures")).to_contain_text(f"Price of {nominal} GPUs")
    if ends_at:
        page.get_by_label("Ends (burst grant)").fill(ends_at)
    page.get_by_label("Justification").fill("Training the detector before the deadline.")
    page.get_by_role("button", name="File request").click()
    expect(page.get_by_test_id("request-state")).to_contain_text("pending")


def _approve_latest(page):
    _nav(page, "Quota")
    page.get_by_role("link", name="Decisions").click()
    request = QuotaRequest.objects.latest("created_at")
    page.get_by_role("link", name=f"#{request.pk}").click()
    expect(page.get_by_test_id("capacity-left")).to_contain_text("16 GPUs")
    page.get_by_role("button", name="Approve").click()
    expect(page.locator(".messages")).to_contain_text("Approved")
    _reload_until(page, page.get_by_test_id("request-state"), "applied")
    return request


@pytest.fixture
def quota_world(world, sim_cluster_synced):
    make_tiers("production", "experiment")
    Quota.objects.create(
        team=world["vision"], pool=sim_cluster_synced.pools["a100"], nominal_gpus=4
    )
    return {**world, "sim": sim_cluster_synced}


def test_lead_asks_manager_approves_and_cluster_queue_follows(
    page, login, quota_world, celery_worker_process
):
    sim = quota_world["sim"]
    login("bob", PASSWORD)
    _file_request(page, nominal="12")
    _logout(page)

    login("maria", PASSWORD)
    _approve_latest(page)
    expect(page.get_by_test_id("granted")).to_contain_text("12 GPUs")
    assert _nominal_in_kubesim(sim) == 12

    _nav(page, "Quota")
    page.get_by_role("link", name="Audit log").click()
    expect(page.locator("main")).to_contain_text("quota_request.approve")
    expect(page.locator("main")).to_contain_text("managed_object.apply")


def test_burst_grant_reverts_by_itself(page, login, quota_world, celery_worker_process):
    sim = quota_world["sim"]
    ends = (timezone.now() + dt.timedelta(days=2)).strftime("%Y-%m-%dT%H:%M")
    login("bob", PASSWORD)
    _file_request(page, nominal="10", ends_at=ends)
    _logout(page)

    login("maria", PASSWORD)
    _approve_latest(page)
    assert _nominal_in_kubesim(sim) == 10
    _logout(page)

    # Time passes: the grant's end is now behind us, and the beat task runs.
    Quota.objects.filter(team=quota_world["vision"]).update(
        ends_at=timezone.now() - dt.timedelta(minutes=1)
    )
    tasks.expire_burst_grants()

    login("bob", PASSWORD)
    _nav(page, "Quota")
    expect(page.get_by_test_id("nominal-vision-a100")).to_have_text("4")
    for _ in range(60):
        if _nominal_in_kubesim(sim) == 4:
            break
        page.wait_for_timeout(500)
    assert _nominal_in_kubesim(sim) == 4


def _gpu_quota_in_kubesim(sim, team="vision") -> dict:
    api = k8s.CustomObjectsApi(sim.api_client)
    cq = api.get_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "clusterqueues", f"qm-{team}")
    a100 = next(f for f in cq["spec"]["resourceGroups"][0]["flavors"] if f["name"] == "a100")
    return next(r for r in a100["resources"] if r["name"] == "nvidia.com/gpu")


def test_a_request_naming_only_nominal_gpus_keeps_the_limits_and_its_page_follows_it(
    page, login, quota_world, celery_worker_process
):
    sim = quota_world["sim"]
    Quota.objects.filter(team=quota_world["vision"]).update(borrowing_limit=2, lending_limit=1)
    login("bob", PASSWORD)
    _file_request(page, nominal="12")  # the limit fields left empty
    expect(page.get_by_test_id("asked")).to_contain_text(
        "12 GPUs nominal; borrowing limit unchanged; lending limit unchanged"
    )
    _logout(page)

    login("maria", PASSWORD)
    _nav(page, "Quota")
    page.get_by_role("link", name="Decisions").click()
    page.get_by_role("link", name=f"#{QuotaRequest.objects.get().pk}").click()
    # Only what the request names is the decision's: no limit fields to lift by mistake.
    expect(page.get_by_label("Grant nominal GPUs")).to_have_value("12")
    expect(page.get_by_label("Borrowing limit")).to_have_count(0)
    page.get_by_role("button", name="Approve").click()
    expect(page.locator(".messages")).to_contain_text("Approved")
    page.evaluate("window.__sameDocument = true")
    # The page follows the request until the cluster has it: no reload.
    expect(page.get_by_test_id("request-state")).to_contain_text("applied", timeout=30_000)
    assert page.evaluate("window.__sameDocument === true")
    expect(page.get_by_test_id("granted")).to_contain_text(
        "12 GPUs nominal; borrowing limit 2; lending limit 1"
    )
    expect(page.get_by_test_id("apply-wait")).to_have_count(0)
    quota = Quota.objects.get(team=quota_world["vision"], pool=sim.pools["a100"])
    assert (quota.nominal_gpus, quota.borrowing_limit, quota.lending_limit) == (12, 2, 1)
    gpu = _gpu_quota_in_kubesim(sim)
    assert (int(gpu["nominalQuota"]), int(gpu["borrowingLimit"]), int(gpu["lendingLimit"])) == (
        12, 2, 1,
    )  # fmt: skip
