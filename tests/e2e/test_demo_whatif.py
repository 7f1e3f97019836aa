"""The what-if page on the demo as `make run` starts it (issue #34): a manager replays the last
30 days of the demo's history with today's configuration and a proposal; the page says the
replay gives the history back, shows the waits as they happened beside it, all as durations
people read (no raw seconds), and the proposal's effect on the team it changes."""

import re

import pytest
from playwright.sync_api import expect

from planning.models import WhatIfRun
from queues.models import Team
from tests.demo.conftest import demo_running
from tests.queues.builders import run_tasks_eagerly

pytestmark = pytest.mark.django_db(transaction=True)
DURATION = re.compile(r"^(\d+ s|\d+ min|\d+ h( \d+ min)?|\d+ d( \d+ h)?|—)$")


@pytest.fixture
def demo(tmp_path, settings):
    settings.WHATIF_PROCESSES = 1  # the replays run in the live server's thread, not forked
    with demo_running(tmp_path) as running:
        yield running


def test_a_manager_replays_the_demos_history_and_the_page_says_it_gives_it_back(
    page, login, demo, monkeypatch
):
    run_tasks_eagerly(monkeypatch)
    login("maria", "quartermaster")
    page.goto("/quota/")
    page.get_by_role("link", name="What-if").click()
    page.get_by_label("Name", exact=True).fill("more A100 for Language")
    expect(page.get_by_label("Replay the last (days)")).to_have_value("30")
    nominal = page.get_by_label("Nominal GPUs of Language in a100", exact=True)
    expect(nominal).to_have_value("8")
    nominal.fill("16")
    page.get_by_role("button", name="Run what-if").click()
    expect(page.locator("#whatif-changes")).to_contain_text("Language in a100: 16 GPUs")
    agreement = page.locator("#whatif-agreement")
    expect(agreement).to_have_attribute("data-agrees", "true", timeout=120_000)
    expect(agreement).to_contain_text("gives back what happened")
    run = WhatIfRun.objects.get()
    assert run.result["agreement"]["agrees"] and run.result["jobs"] > 2000
    # Every team of Research with jobs: its waits as it happened and replayed, as durations.
    nlp = page.locator('#whatif-teams tr[data-team="nlp"]')
    for cell in (".wait-p50 .today", ".wait-p90 .today", ".wait-p90 .proposal",
                 ".as-it-happened .p50", ".as-it-happened .p90"):  # fmt: skip
        assert DURATION.match(nlp.locator(cell).inner_text()), cell
    # The replay of today's p90 is what happened (as the agreement says), and twice the quota
    # shortens Language's wait.
    nlp_id = str(Team.objects.get(slug="nlp").pk)
    today = run.result["today"]["teams"][nlp_id]
    proposal = run.result["proposal"]["teams"][nlp_id]
    assert abs(today["wait_p90_seconds"] - today["actual_wait_p90_seconds"]) <= max(
        60, 0.1 * today["actual_wait_p90_seconds"])  # fmt: skip
    assert proposal["wait_p90_seconds"] < today["wait_p90_seconds"]
    body = page.locator("#whatif-result").inner_text()
    assert not re.search(r"\d+\.\d s\b", body)  # no raw seconds left
