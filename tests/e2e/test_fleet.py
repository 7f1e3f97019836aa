"""Fleet journeys in Chromium: an admin registers kubesim and defines a pool; a researcher reads."""

import pytest
from playwright.sync_api import expect

from fleet.models import Cluster, Node
from kubesim.testing import running_kubesim
from tests.factories import PASSWORD
from tests.fixtures_cluster import CRDS_DIR, SIM_FLEET

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _reload_until(page, locator, text, tries=40):
    for _ in range(tries):
        if text in locator.inner_text():
            return
        page.wait_for_timeout(500)
        page.reload()
    expect(locator).to_contain_text(text)


def test_admin_registers_cluster_syncs_and_defines_a_pool(
    page, login, world, celery_worker_process
):
    with running_kubesim(fleet=SIM_FLEET, crds_dir=CRDS_DIR, controllers=False) as sim:
        login("admin", PASSWORD)
        page.get_by_role("link", name="Fleet", exact=True).click()
        page.get_by_role("link", name="Register a cluster").click()
        page.get_by_label("Name").fill("gpu-lab")
        page.get_by_role("button", name="Save cluster").click()
        expect(page.get_by_role("alert").first).to_contain_text("Give the kubeconfig path")

        page.get_by_label("Kubeconfig path").fill(sim.kubeconfig)
        page.get_by_role("button", name="Save cluster").click()
        expect(page.locator(".messages")).to_contain_text("gpu-lab")

        # The worker syncs after the registration commits: all five nodes land in "no pool".
        unpooled = page.get_by_test_id("unpooled")
        _reload_until(page, page.locator("main"), "spare-node-0")
        expect(unpooled).to_contain_text("l4-node-1")
        expect(page.get_by_test_id("clusters")).not_to_contain_text("never")

        page.get_by_role("link", name="Define a pool").click()
        page.get_by_label("Name").fill("l4")
        page.get_by_label("GPU model").select_option(label="L4")
        page.get_by_label("Node labels").fill("accelerator=nvidia-l4")
        page.get_by_role("button", name="Save pool").click()
        expect(page.locator(".messages")).to_contain_text("Pool “l4” saved")

        page.get_by_role("button", name="Sync now").click()
        expect(page.locator(".messages")).to_contain_text("sync of “gpu-lab” queued")
        # No reload: the page refreshes its figures by itself (htmx, every 15 s).
        expect(page.get_by_test_id("free-l4")).to_have_text("8", timeout=45_000)
        expect(page.get_by_test_id("unpooled")).not_to_contain_text("l4-node-1")

        page.get_by_role("link", name="l4", exact=True).click()
        expect(page.get_by_test_id("nodes")).to_contain_text("l4-node-0")

    cluster = Cluster.objects.get(name="gpu-lab")
    assert Node.objects.filter(cluster=cluster, pool__name="l4").count() == 2


def test_researcher_sees_pools_with_free_gpus(page, login, world, sim_cluster_synced):
    sim_cluster_synced.kube.patch("v1", "Node", "a100-node-1", {"spec": {"unschedulable": True}})
    sim_cluster_synced.sync()

    login("alice", PASSWORD)
    page.get_by_role("link", name="Fleet", exact=True).click()
    pools = page.get_by_test_id("pools")
    expect(pools.locator("tr[data-pool='a100']")).to_contain_text("A100-SXM4-80GB")
    expect(page.get_by_test_id("free-a100")).to_have_text("8")
    expect(page.get_by_test_id("free-l4")).to_have_text("8")
    expect(page.get_by_test_id("clusters")).to_have_count(0)
    expect(page.get_by_role("link", name="Register a cluster")).to_have_count(0)


def test_admin_disables_enables_and_deletes_a_cluster(page, login, world, tmp_path):
    from queues.models import Job
    from tests.queues.builders import job_world_setup, submit

    jw = job_world_setup(world)
    cluster = jw["cluster"]
    Cluster.objects.filter(pk=cluster.pk).update(
        last_error="cannot reach the Kubernetes API at https://10.0.0.9: timed out"
    )
    job = submit(jw, name="waits for the cluster")
    login("admin", PASSWORD)
    page.get_by_role("link", name="Fleet", exact=True).click()
    expect(page.get_by_test_id(f"health-{cluster.name}")).to_contain_text("timed out")
    page.get_by_role("link", name=cluster.name).click()
    page.get_by_label("Reason (shown to people whose jobs wait)").fill("driver upgrade")
    page.get_by_role("button", name="Disable").click()
    expect(page.locator(".messages")).to_contain_text("disabled")
    expect(page.get_by_text("Disabled: driver upgrade.")).to_be_visible()
    assert "Disable offline?" in page.dialogs[-1]
    # The job waiting for it says why (the disable told it, after commit).
    page.goto(f"/jobs/{job.pk}/")
    expect(page.get_by_test_id("pending-reason")).to_contain_text("disabled by the platform admins")
    page.go_back()
    page.get_by_label("Reason (kept in the audit log)").fill("drivers upgraded")
    page.get_by_role("button", name="Enable").click()
    expect(page.locator(".messages")).to_contain_text("enabled")
    # Delete is refused while the job is active, and done with its cancellation.
    page.get_by_role("button", name="Delete cluster").click()
    expect(page.locator(".messages")).to_contain_text("1 job(s) are active")
    page.get_by_label("Cancel its active jobs").check()
    page.get_by_role("button", name="Delete cluster").click()
    expect(page.locator(".messages")).to_contain_text("deleted")
    expect(page.get_by_test_id("clusters")).to_have_count(0)
    assert Job.objects.get(pk=job.pk).state == "cancelled"
