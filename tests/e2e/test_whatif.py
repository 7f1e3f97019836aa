"""Browser journey of the what-if simulator: a manager doubles a team's quota in a proposal,
sees last day's jobs replayed against it beside today's configuration, and applies it, which
files the quota request for the usual decision."""

import pytest
from playwright.sync_api import expect

from planning.models import WhatIfRun
from queues.models import QuotaRequest
from tests.factories import PASSWORD
from tests.planning.test_whatif import history  # noqa: F401  (the fixture)
from tests.queues.builders import quota_world_setup, run_tasks_eagerly

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def quota_world(world):
    return quota_world_setup(world)


def test_a_manager_runs_a_what_if_and_applies_it(page, login, history, monkeypatch):  # noqa: F811
    w = history
    run_tasks_eagerly(monkeypatch)
    login("maria", PASSWORD)
    page.goto("/quota/")
    page.get_by_role("link", name="What-if").click()
    page.get_by_label("Name", exact=True).fill("double vision")
    page.get_by_label("Replay the last (days)").fill("1")
    nominal = page.get_by_label("Nominal GPUs of Vision in a100")
    expect(nominal).to_have_value("8")
    nominal.fill("-3")
    page.get_by_role("button", name="Run what-if").click()
    expect(page.locator(".form-error")).to_contain_text("Vision · a100 (nominal_gpus)")
    expect(page.locator(".form-error li")).to_have_count(1)
    assert not WhatIfRun.objects.exists()
    page.get_by_label("Nominal GPUs of Vision in a100").fill("16")
    page.get_by_role("button", name="Run what-if").click()
    expect(page.locator("#whatif-changes")).to_contain_text("Vision in a100: 16 GPUs")
    row = page.locator('#whatif-teams tr[data-team="vision"]')
    # Today: the six jobs ran one at a time (p50 wait 2.5 h); with 16 GPUs nobody waits.
    expect(row.locator(".wait-p50 .today")).to_have_text("2 h 30 min")
    expect(row.locator(".wait-p50 .proposal")).to_have_text("0 s")
    expect(page.locator('#whatif-teams tr[data-team="recsys"]')).to_have_count(0)  # not hers
    page.get_by_role("button", name="Apply this proposal").click()
    expect(page.locator("#whatif-applied")).to_contain_text("quota request")
    request = QuotaRequest.objects.get()
    assert (request.team, request.nominal_gpus, request.state) == (w["vision"], 16, "pending")
    page.locator("#whatif-applied a").first.click()
    expect(page.locator("body")).to_contain_text("What-if proposal #")
