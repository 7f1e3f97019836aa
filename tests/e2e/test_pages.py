"""The pages in Chromium as people use them: a phone-sized job form in one column, long names
that wrap, a long command counted against its limit, and a held team warned before it submits."""

import pytest
from playwright.sync_api import expect

from tests.factories import PASSWORD
from tests.queues.builders import job_world_setup, submit

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def jw_tx(world):
    return job_world_setup(world)


def _no_sideways_scroll(page):
    return page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


def test_on_a_phone_the_job_form_is_one_column_and_the_preview_comes_below(page, login, jw_tx):
    page.set_viewport_size({"width": 390, "height": 844})
    login("alice", PASSWORD)
    page.goto("/jobs/new/")
    form = page.locator("#job-form").bounding_box()
    preview = page.locator("#preview").bounding_box()
    assert preview["y"] >= form["y"] + form["height"]  # below, not beside
    assert preview["x"] + preview["width"] <= 390
    assert _no_sideways_scroll(page)


def test_a_200_character_name_wraps_on_the_job_page_and_the_list(page, login, jw_tx):
    job = submit(jw_tx, name="a" * 200)
    page.set_viewport_size({"width": 1280, "height": 900})
    login("alice", PASSWORD)
    page.goto(f"/jobs/{job.pk}/")
    expect(page.get_by_test_id("cluster-name")).to_contain_text(job.k8s_name)
    assert _no_sideways_scroll(page)
    page.goto("/jobs/")
    link = page.get_by_role("link", name="a" * 200)
    assert link.get_attribute("title") == "a" * 200
    assert _no_sideways_scroll(page)


def test_a_long_command_is_counted_and_refused_beyond_the_limit(page, login, jw_tx):
    login("alice", PASSWORD)
    page.goto("/jobs/new/")
    page.get_by_label("Name").fill("too long")
    page.get_by_label("Image").fill("ghcr.io/acme/train:1.0")
    page.get_by_label("Command").fill("x" * 10_000)  # the whole text stays in the field
    expect(page.locator(".char-counter.over-limit")).to_contain_text("2,000 too many")
    page.get_by_role("button", name="Submit job").click()
    # The field's own error (the live preview may say it too, beside the form).
    expect(
        page.locator(".field-error", has_text="at most 8000 characters (it has 10000)")
    ).to_be_visible()
    assert len(page.get_by_label("Command").input_value()) == 10_000


def test_a_held_team_is_warned_before_it_submits(page, login, jw_tx):
    team = jw_tx["vision"]
    team.queue_hold_reason = "Budget for November 2026 spent (100 EUR)."
    team.save()
    login("alice", PASSWORD)
    expect(page.get_by_test_id("hold-vision")).to_contain_text("Your team's queue is held")
    page.goto("/jobs/new/")
    expect(page.get_by_test_id("hold-warning")).to_contain_text("Who can release it")


def test_a_template_submission_and_a_resubmission_go_through_as_filled(page, login, jw_tx):
    """Regression: both filled the JobSet driver field with "[]" and every one was refused."""
    from queues.models import Job
    from queues.services.jobs.templates import job_template_from_job

    base = submit(jw_tx, name="coordinated", kind="jobset", workers=2, gpus_per_worker=1,
                  driver_command=["python", "driver.py"])  # fmt: skip
    job_template_from_job(actor=jw_tx["alice"], job=base, name="jobset with driver")
    login("alice", PASSWORD)
    page.goto("/jobs/new/")
    page.get_by_test_id("templates").get_by_role("link", name="Vision / jobset with driver").click()
    expect(page.get_by_label("Name", exact=True)).to_have_value("coordinated")
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator(".messages")).to_contain_text("Job “coordinated” submitted.")
    from_template = Job.objects.exclude(pk=base.pk).get()
    assert from_template.driver_command == ["python", "driver.py"]

    page.get_by_role("link", name="Resubmit").click()
    expect(page.get_by_label("Name", exact=True)).to_have_value("coordinated")
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator(".messages")).to_contain_text("Job “coordinated” submitted.")
    again = Job.objects.exclude(pk__in=[base.pk, from_template.pk]).get()
    assert (again.kind, again.workers) == ("jobset", 2)
    assert again.driver_command == ["python", "driver.py"]

    plain = submit(jw_tx, name="plain job", gpus_per_worker=1)
    page.goto(f"/jobs/{plain.pk}/")
    page.get_by_role("link", name="Resubmit").click()
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator(".messages")).to_contain_text("Job “plain job” submitted.")
    assert Job.objects.filter(name="plain job").count() == 2
