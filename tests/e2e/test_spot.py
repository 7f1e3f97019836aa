"""Browser journey for spot capacity: a researcher is told on the job form that a spot pool
takes only interruptible jobs, submits one with a checkpoint volume, and after the provider
takes the node back sees on the job's page that it was interrupted and resumed to the end."""

import time

import pytest
from playwright.sync_api import expect

from queues.models import Job
from queues.services.jobs.apply import job_apply
from tests.e2e.conftest import fill_job_form, open_section
from tests.factories import PASSWORD
from tests.queues.builders import sync_until
from tests.queues.test_spot import spot_sim


@pytest.fixture
def sim_spot_tx(world):
    with spot_sim(world) as sim:
        yield sim


def test_a_spot_job_resumes_after_its_node_is_taken_back(page, login, sim_spot_tx):
    login("alice", PASSWORD)
    page.goto("/jobs/new/")
    fill_job_form(page, name="cheap run", workers=1, gpus=1, pool="l4", expected=30)
    open_section(page, "Spot")
    page.get_by_label("Checkpoint volume").fill("ckpt")
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator(".field-error").first).to_contain_text("Pool l4 is spot capacity")
    assert not Job.objects.exists()
    page.get_by_label("Interruptible (may run on spot capacity)").check()
    expect(page.get_by_test_id("yaml-preview")).to_contain_text("DisruptionTarget")
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator(".messages")).to_contain_text("submitted")
    job = Job.objects.get()
    assert job_apply(job_id=job.pk) == "applied"
    assert sync_until(job, Job.State.RUNNING).state == Job.State.RUNNING
    time.sleep(1.0)
    assert sim_spot_tx["sim"].sim.interrupt("l4-node-0", notice=1, down=2)
    job = sync_until(job, Job.State.SUCCEEDED, timeout=30)
    assert job.state == Job.State.SUCCEEDED
    page.goto(f"/jobs/{job.pk}/")
    expect(page.get_by_test_id("spot")).to_have_text(
        "Interruptible; checkpoints on ckpt at /checkpoints; interrupted 1 time"
    )
    expect(page.locator(".job-timeline")).to_contain_text("resumes from its checkpoint on ckpt")
