"""Browser journey for idle-GPU accountability: a researcher's job that leaves its GPUs idle is
flagged on its page, she and her lead are warned, the tier's policy suspends it, and she resumes
it from the page."""

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from billing.services.idle import idle_enforce
from queues.models import Job, PriorityTier
from tests.billing.test_idle import _scrape
from tests.e2e.conftest import fill_job_form, open_section
from tests.factories import PASSWORD
from tests.queues.builders import run_tasks_eagerly, sync_until

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_idle_job_is_warned_then_suspended_and_resumed_by_its_owner(
    page, login, sim_jobs_tx, monkeypatch, mailoutbox
):
    w = sim_jobs_tx
    run_tasks_eagerly(monkeypatch)
    PriorityTier.objects.filter(name="experiment").update(
        idle_threshold_percent=5, idle_after_minutes=10, idle_grace_minutes=15,
        idle_action="suspend",
    )  # fmt: skip
    w["bob"].email = "bob@example.org"
    w["bob"].save()
    login("alice", PASSWORD)
    page.goto("/jobs/new/")
    fill_job_form(page, name="forgotten notebook", workers=1, gpus=1, expected=600,
                  command="jupyter lab")  # fmt: skip
    open_section(page, "Arguments and environment")
    page.get_by_label("Environment", exact=True).fill("KUBESIM_GPU_UTIL=0")
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator(".messages")).to_contain_text("submitted")
    job = Job.objects.get()  # applied at once: the tasks run in-process here
    assert sync_until(job, Job.State.RUNNING).state == Job.State.RUNNING

    t0 = timezone.now()
    _scrape(w, t0)
    page.goto(f"/jobs/{job.pk}/")
    banner = page.get_by_test_id("idle-banner")
    expect(banner).to_contain_text("Its GPUs are idle: 0.0 % utilisation")
    expect(banner).to_contain_text("are warned at")

    _scrape(w, t0 + timedelta(minutes=10))
    assert idle_enforce(now=t0 + timedelta(minutes=10))["warned"] == 1
    assert any(m.subject.endswith("forgotten notebook: GPUs idle") for m in mailoutbox)
    page.reload()
    expect(banner).to_contain_text("Owner and team leads were warned at")
    expect(banner).to_contain_text("It will be suspended at")

    _scrape(w, t0 + timedelta(minutes=25))
    assert idle_enforce(now=t0 + timedelta(minutes=25))["suspended"] == 1
    assert sync_until(job, Job.State.QUEUED).state == Job.State.QUEUED
    page.reload()
    expect(banner).to_contain_text("Suspended because its GPUs were idle")
    page.get_by_role("button", name="Resume job").click()
    expect(page.locator(".messages")).to_contain_text("Resumed")
    assert sync_until(job, Job.State.RUNNING).state == Job.State.RUNNING
    page.reload()
    expect(page.get_by_test_id("idle-banner")).to_have_count(0)
