"""Browser journey for job kinds: a researcher submits a PyTorchJob from the job form (the live
preview shows the master and workers the operator will run), follows it to the end on its page,
which names its kind and its master and worker pods, and is told on the form when a driver
command comes without the JobSet kind."""

from playwright.sync_api import expect

from queues.models import Job
from queues.services.jobs.apply import job_apply
from tests.e2e.conftest import fill_job_form, open_section
from tests.factories import PASSWORD
from tests.queues.builders import sync_until


def test_a_researcher_runs_a_pytorchjob(page, login, sim_jobs_tx):
    login("alice", PASSWORD)
    page.goto("/jobs/new/")
    fill_job_form(page, name="ddp resnet", workers=3, gpus=2, expected=4)
    open_section(page, "Kind, gang and retries")
    page.get_by_label("JobSet driver").fill("python driver.py")
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator(".field-error").first).to_contain_text("Only a JobSet has a driver")
    assert not Job.objects.exists()
    page.get_by_label("JobSet driver").fill("")
    page.get_by_label("Kind", exact=True).select_option("pytorchjob")
    preview = page.get_by_test_id("yaml-preview")
    expect(preview).to_contain_text("kind: PyTorchJob")
    expect(preview).to_contain_text("Master:")
    expect(preview).to_contain_text("Worker:")
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator(".messages")).to_contain_text("submitted")
    job = Job.objects.get()
    assert job.kind == "pytorchjob"
    assert job_apply(job_id=job.pk) == "applied"
    job = sync_until(job, Job.State.RUNNING)
    page.goto(f"/jobs/{job.pk}/")
    expect(page.get_by_test_id("job-kind")).to_have_text("PyTorchJob: 1 master, 2 workers")
    pods = page.get_by_test_id("pods")
    expect(pods).to_contain_text(f"{job.k8s_name}-master-0")
    expect(pods).to_contain_text(f"{job.k8s_name}-worker-1")
    job = sync_until(job, Job.State.SUCCEEDED)
    page.reload()
    expect(page.get_by_test_id("job-state")).to_have_text("Succeeded")
