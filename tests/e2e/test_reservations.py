"""Advance reservations in Chromium: a lead requests GPUs for a window, the manager sees its
price and approves it, the dashboard's timeline shows it with its cost, and when the window
opens the beat's task puts the GPUs into the team's ClusterQueue in kubesim."""

import datetime as dt
from decimal import Decimal

import pytest
from django.utils import timezone
from kubernetes import client as k8s
from playwright.sync_api import expect

from fleet.models import GpuPrice
from queues import tasks
from queues.models import Quota, Reservation
from tests.factories import PASSWORD
from tests.queues.builders import make_tiers

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _a100_gpu(sim, team="vision") -> dict:
    api = k8s.CustomObjectsApi(sim.api_client)
    try:
        cq = api.get_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "clusterqueues",
                                           f"qm-{team}")  # fmt: skip
    except k8s.exceptions.ApiException as exc:
        if exc.status == 404:  # not applied yet
            return {}
        raise
    a100 = next(f for f in cq["spec"]["resourceGroups"][0]["flavors"] if f["name"] == "a100")
    return next(r for r in a100["resources"] if r["name"] == "nvidia.com/gpu")


def _nav(page, name):
    page.get_by_role("navigation", name="Main").get_by_role("link", name=name).click()


@pytest.fixture
def reservation_world(world, sim_cluster_synced):
    make_tiers("production", "experiment")
    a100 = sim_cluster_synced.pools["a100"]
    Quota.objects.create(team=world["vision"], pool=a100, nominal_gpus=4)
    GpuPrice.objects.create(gpu_model=a100.gpu_model, price_per_hour=Decimal("3.0000"),
                            currency="EUR",
                            effective_from=timezone.now() - dt.timedelta(days=30))  # fmt: skip
    return {**world, "sim": sim_cluster_synced}


def test_lead_reserves_manager_approves_and_the_dashboard_shows_it_with_its_cost(
    page, login, reservation_world, celery_worker_process
):
    w = reservation_world
    start = (timezone.now() + dt.timedelta(days=1)).replace(minute=0, second=0, microsecond=0)
    login("bob", PASSWORD)
    _nav(page, "Quota")
    page.get_by_role("link", name="Reservations").click()
    page.get_by_role("link", name="Reserve GPUs").click()
    page.get_by_label("Team").select_option(label="Vision")
    page.get_by_label("Pool", exact=True).select_option(label="a100")
    # Too many first: 16 GPUs, vision's 4 guaranteed: 12 can be reserved, and the form says so.
    page.get_by_label("GPUs").fill("13")
    page.get_by_label("Starts (UTC)").fill(f"{start:%Y-%m-%dT%H:%M}")
    page.get_by_label("Ends (UTC)").fill(f"{start + dt.timedelta(hours=6):%Y-%m-%dT%H:%M}")
    page.get_by_label("Reason").fill("Conference deadline: final runs.")
    page.get_by_role("button", name="Request reservation").click()
    expect(page.locator(".field-error")).to_contain_text("at most 12 can be reserved")
    page.get_by_label("GPUs").fill("4")
    page.get_by_role("button", name="Request reservation").click()
    expect(page.get_by_test_id("reservation-state")).to_contain_text("pending")
    # 4 GPUs × 6 h × 3.00, billed in full (vision's policy: allocated).
    expect(page.get_by_test_id("reservation-cost")).to_contain_text("72.00 EUR")
    page.get_by_role("button", name="Log out").click()

    login("maria", PASSWORD)
    _nav(page, "Quota")
    page.get_by_role("link", name="Reservations").click()
    reservation = Reservation.objects.get()
    page.locator("#reservations-awaiting").get_by_role("link", name=f"#{reservation.pk}").click()
    expect(page.get_by_test_id("reservation-cost")).to_contain_text("72.00 EUR")
    expect(page.get_by_test_id("reservation-room")).to_contain_text("12 GPUs")
    page.get_by_role("button", name="Approve").click()
    expect(page.locator(".messages")).to_contain_text("Reservation approved")
    expect(page.get_by_test_id("reservation-state")).to_contain_text("approved")

    _nav(page, "Dashboard")
    row = page.locator("#reservations-timeline").locator(f'tr[data-reservation="{reservation.pk}"]')
    expect(row).to_contain_text("Vision")
    expect(row).to_contain_text("72.00 EUR")
    expect(row.get_by_role("img")).to_be_visible()
    page.get_by_role("button", name="Log out").click()

    # The window opens (moved to now) and the beat's task runs: the worker puts the 4 GPUs
    # into vision's ClusterQueue, lent to nobody.
    Reservation.objects.filter(pk=reservation.pk).update(
        starts_at=timezone.now() - dt.timedelta(minutes=1)
    )
    tasks.advance_reservations()
    for _ in range(60):
        if str(_a100_gpu(w["sim"]).get("nominalQuota")) == "8":
            break
        page.wait_for_timeout(500)
    gpu = _a100_gpu(w["sim"])
    assert (str(gpu["nominalQuota"]), str(gpu.get("lendingLimit"))) == ("8", "4")
    login("alice", PASSWORD)
    _nav(page, "Dashboard")
    row = page.locator("#reservations-timeline").locator(f'tr[data-reservation="{reservation.pk}"]')
    expect(row).to_contain_text("active")
