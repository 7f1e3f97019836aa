"""The GPU fault loop in Chromium (issue #35): a GPU under alice's job fails in kubesim; the
platform admin sees the failed GPU and its node tainted, alice sees on her job's page that it
was stopped, resubmitted and credited, the month's report shows the credit, and the admin
returns the node to service."""

from __future__ import annotations

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from billing import dcgm
from billing.models import GpuFaultCredit
from billing.services.gpufaults import gpu_faults_contain_all, gpu_health_read
from fleet.services.node_taints import GPU_FAULT_TAINT_KEY
from queues.services.jobs.apply import job_apply
from tests.billing.conftest import make_price
from tests.factories import PASSWORD
from tests.queues.builders import run_tasks_eagerly, submit, sync_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def faulted(sim_jobs_tx, monkeypatch):
    """alice's 2-GPU job runs in kubesim; one of its GPUs fails (XID 79) and the loop runs."""
    run_tasks_eagerly(monkeypatch)  # the deletion, the e-mails, the copy's apply: in-process
    w = sim_jobs_tx
    make_price(w["pools"]["a100"].gpu_model, "3.0000")
    url = f"{w['sim'].sim.url}/metrics/dcgm"
    w["cluster"].dcgm_scrape_urls = [url]
    w["cluster"].save(update_fields=["dcgm_scrape_urls"])
    job = submit(w, name="long-train", gpus_per_worker=2)
    job_apply(job_id=job.pk)
    job = sync_until(job, "running")
    pod = job.pods.get().name
    held = next(s.sid for s in dcgm.scrape(url) if s.sid.pod == pod)
    index = {h.gpu_uuid: h.gpu_index for h in dcgm.scrape_health(url)}[held.gpu_uuid]
    w["sim"].sim.gpu_fault(held.node, index, "xid:79")
    now = timezone.now()
    gpu_health_read(cluster=w["cluster"], urls=[url], prometheus="", at=now)
    assert gpu_faults_contain_all(now=now)["contained"] == 1
    return {**w, "job": job, "node": held.node, "index": index}


def _taints(w):
    node = w["sim"].kube.get("v1", "Node", w["node"])
    return [t["key"] for t in (node.get("spec") or {}).get("taints") or []]


def test_admin_owner_and_finance_follow_a_gpu_fault_to_the_bill(page, login, faulted):
    w, node, index = faulted, faulted["node"], faulted["index"]
    credit = GpuFaultCredit.objects.get()

    # The platform admin: the node is failed and tainted, the fault names the job it hit.
    login("admin", PASSWORD)
    page.goto("/billing/gpu-health/")
    row = page.locator(f'#gpu-health-nodes tr[data-node="{node}"]')
    expect(row).to_have_attribute("data-state", "failed")
    expect(row).to_contain_text("tainted")
    row.get_by_role("link", name=node).click()
    expect(page.get_by_test_id("node-taint")).to_contain_text("quartermaster.dev/gpu-fault")
    expect(page.locator(f'#node-gpus tr[data-gpu="{index}"]')).to_have_attribute(
        "data-state", "failed"
    )
    faults = page.locator("#node-faults")
    expect(faults).to_contain_text("XID 79")
    expect(faults).to_contain_text("long-train")
    expect(faults).to_contain_text(f"resubmitted as #{credit.resubmitted_job_id}")
    expect(page.locator("#node-history")).to_contain_text("Failed")

    # The job's owner: the notice on the job's page.
    page.context.clear_cookies()
    login("alice", PASSWORD)
    page.goto(f"/jobs/{w['job'].pk}/")
    notice = page.get_by_test_id("gpu-fault-notice")
    expect(notice).to_contain_text(f"GPU {index} of node {node} failed")
    expect(notice).to_contain_text(f"resubmitted as job #{credit.resubmitted_job_id}")
    expect(notice.locator(".fault-credit-amount")).to_have_text(f"{credit.amount} EUR")

    # The month's report: the credit line, linked to the fault and the job.
    page.goto(f"/billing/reports/{timezone.now():%Y-%m}/")
    line = page.locator(f'#fault-credit-lines tbody tr[data-fault="{credit.fault_id}"]')
    expect(line).to_contain_text("long-train")
    expect(line).to_contain_text(f"{node} / GPU {index}")
    expect(line.locator(".fault-credit")).to_have_text(f"− {credit.amount} EUR")

    # The admin returns the node to service; the loop (run in-process here) untaints it.
    page.context.clear_cookies()
    login("admin", PASSWORD)
    page.goto(f"/billing/gpu-health/{w['cluster'].pk}/{node}/")
    page.get_by_role("button", name=f"Return {node} to service").click()
    expect(page.locator(".field-error, .errorlist").first).to_be_visible()  # a reason is needed
    page.get_by_label("Why the node can run jobs again").fill("GPU reseated, burn-in passed")
    page.get_by_role("button", name=f"Return {node} to service").click()
    expect(page.locator(".messages")).to_contain_text("returned to service")
    page.reload()
    expect(page.get_by_test_id("node-taint")).to_have_text("Not tainted by the portal.")
    expect(page.locator("#node-faults")).to_contain_text("Returned to service")
    expect(page.locator("#node-faults")).to_contain_text("GPU reseated, burn-in passed")
    assert GPU_FAULT_TAINT_KEY not in _taints(w)
