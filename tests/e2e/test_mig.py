"""Browser journey for MIG: a researcher submits a job to a MIG pool, whose choice names its
profile; the live preview asks for MIG instances, not GPUs; the job runs and its page counts
instances."""

import pytest
from playwright.sync_api import expect

from queues.models import Job
from queues.services.jobs.apply import job_apply
from tests.e2e.conftest import fill_job_form
from tests.factories import PASSWORD
from tests.queues.builders import sync_until
from tests.queues.test_mig import mig_sim


@pytest.fixture
def sim_mig_tx(world):
    with mig_sim(world) as sim:
        yield sim


def test_a_researcher_runs_a_job_on_mig_instances(page, login, sim_mig_tx):
    login("alice", PASSWORD)
    page.goto("/jobs/new/")
    expect(page.get_by_text("In a MIG pool, instances of its profile")).to_be_visible()
    mig_pool = {"label": "a100 (A100-SXM4-80GB, MIG 1g.10gb instances)"}
    fill_job_form(page, name="small inference", workers=2, gpus=1, command="python serve.py",
                  pool=mig_pool, expected=60)  # fmt: skip
    expect(page.get_by_test_id("yaml-preview")).to_contain_text("nvidia.com/mig-1g.10gb: '1'")
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator(".messages")).to_contain_text("submitted")
    job = Job.objects.get()
    assert job_apply(job_id=job.pk) == "applied"
    job = sync_until(job, Job.State.RUNNING)
    assert job.state == Job.State.RUNNING
    page.goto(f"/jobs/{job.pk}/")
    expect(page.get_by_test_id("workers")).to_have_text("2 × 1 MIG 1g.10gb instance (gang)")
    expect(page.get_by_test_id("pods")).to_contain_text("a100-node-0")
