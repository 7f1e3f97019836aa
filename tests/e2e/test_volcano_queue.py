"""A researcher sees where their job waits on a Volcano cluster, and when it may start."""

import re

import pytest
from playwright.sync_api import expect

from tests.factories import PASSWORD
from tests.queues.builders import volcano_queue_full

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_researcher_sees_the_position_and_estimate_of_a_waiting_volcano_job(
    page, login, sim_jobs_tx
):
    _, short, long, (w1, w2, w3) = volcano_queue_full(sim_jobs_tx)
    assert (w1.queue_position, w2.queue_position, w3.queue_position) == (1, 2, 3)
    login("alice", PASSWORD)
    page.get_by_role("link", name="Jobs", exact=True).click()
    # The job list says where each waits, as for Kueue.
    expect(page.get_by_role("row", name=re.compile(r"\bw2\b"))).to_contain_text("#2 in queue")
    page.get_by_role("link", name="w2", exact=True).click()
    expect(page.get_by_test_id("queue-position")).to_have_text(
        "Position 2 in the team's queue (from Volcano's queue order: priority, then submission "
        "time)."
    )
    estimate = page.get_by_test_id("estimated-start")
    when = w2.estimated_start.strftime("%Y-%m-%d %H:%M:%S")
    expect(estimate).to_contain_text(f"Estimated start: {when} UTC")
    expect(estimate).to_contain_text("Estimated with Volcano's queue order")
    expect(estimate).to_contain_text("(this job's 4 and 4 ahead of it)")
