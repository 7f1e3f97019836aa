"""Browser journey for topology-aware placement: a researcher asks on the job form to keep a
job's workers within one rack (and is told when a narrower level could never hold them), sees
Kueue's annotation in the live preview, and the job runs inside one rack, which its page names;
the dashboard shows the free GPUs of each rack."""

import pytest
from playwright.sync_api import expect

from queues.models import Job
from queues.services.jobs.apply import job_apply
from tests.e2e.conftest import fill_job_form, open_section
from tests.factories import PASSWORD
from tests.queues.builders import sync_until
from tests.queues.test_topology import topology_sim


@pytest.fixture
def sim_topology_tx(world):
    with topology_sim(world) as sim:
        yield sim


def test_a_researcher_keeps_a_jobs_workers_within_one_rack(page, login, sim_topology_tx):
    login("alice", PASSWORD)
    page.goto("/jobs/new/")
    fill_job_form(page, name="ring allreduce", workers=2, gpus=4)
    open_section(page, "Placement")
    expect(page.get_by_text("a100: rack, host.")).to_be_visible()
    # Two 4-GPU workers cannot share one 4-GPU host: said on the form, nothing created.
    page.get_by_label("Keep workers within").select_option("host")
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator(".field-error").first).to_contain_text(
        "At most 1 workers of 4 GPUs fit within one host of pool a100"
    )
    assert not Job.objects.exists()
    page.get_by_label("Keep workers within").select_option("rack")
    page.get_by_label("Placement", exact=True).select_option("required")
    expect(page.get_by_test_id("yaml-preview")).to_contain_text(
        "kueue.x-k8s.io/podset-required-topology: cloud.provider.com/topology-rack"
    )
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator(".messages")).to_contain_text("submitted")
    job = Job.objects.get()
    assert (job.topology_level, job.topology_mode) == ("rack", "required")
    assert job_apply(job_id=job.pk) == "applied"
    job = sync_until(job, Job.State.RUNNING)
    racks = {int(p.node_name.rsplit("-", 1)[1]) // 2 for p in job.pods.all()}
    assert len(racks) == 1
    page.goto(f"/jobs/{job.pk}/")
    expect(page.get_by_test_id("placement")).to_have_text(
        f"Workers within one rack (required); ran in a100-rack-{racks.pop()}"
    )
    # The dashboard shows what each rack has free (after the inventory sync sees the pods).
    sim_topology_tx["sim"].sync()
    page.goto("/dashboard/")
    table = page.get_by_test_id("topology-a100-rack")
    expect(table).to_be_visible()
    expect(table.get_by_test_id("domain-a100-rack-0")).to_contain_text("8")
    free = [table.get_by_test_id(f"domain-a100-rack-{i}").locator("td").nth(3) for i in (0, 1)]
    assert sorted(int(cell.inner_text()) for cell in free) == [0, 8]
