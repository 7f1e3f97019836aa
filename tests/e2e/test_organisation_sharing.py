"""Browser journey of sharing across the organisation: a researcher's job is too large for her
department; a platform admin lets two departments share idle GPUs and weighs one; the job then
runs on the other department's idle GPUs, and the department's manager sees it borrow."""

import pytest
from playwright.sync_api import expect

from queues.manifests.quotas import ORGANISATION_COHORT, cohort_name
from queues.models import AuditEvent, Job
from queues.selectors.fair_share import department_sharing
from queues.services.reconcile import cluster_check_drift
from tests.conftest import wait_until
from tests.e2e.conftest import fill_job_form
from tests.factories import PASSWORD, MembershipFactory
from tests.queues.builders import run_tasks_eagerly, sync_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_an_admin_lets_departments_share_and_a_too_large_job_runs(
    page, login, sim_jobs_tx, monkeypatch
):
    w = sim_jobs_tx
    run_tasks_eagerly(monkeypatch)
    w["sim"].sim.controllers.kueue.fair_sharing = True
    MembershipFactory(user=w["carol"], team=w["recsys"], role="member")

    def ask_for_six():
        page.goto("/jobs/new/")
        page.get_by_label("Team", exact=True).select_option(label="Recommendations")
        fill_job_form(page, name="wide", workers=1, gpus=6, expected=600)
        page.get_by_role("button", name="Submit job").click()

    # Recommendations has 4 A100s and Product no other team to lend it more.
    login("carol", PASSWORD)
    ask_for_six()
    expect(page.locator("#job-form")).to_contain_text("This job could never start")
    assert not Job.objects.filter(team=w["recsys"]).exists()
    page.get_by_role("button", name="Log out").click()

    login("admin", PASSWORD)
    page.get_by_role("link", name="Teams", exact=True).click()
    page.get_by_role("link", name="Departments, and how they share idle GPUs").click()
    product = page.get_by_test_id("department-product")
    expect(product.get_by_test_id("department-shares")).to_have_text("No")
    for slug, name, weight in [("research", "Research", None), ("product", "Product", "2")]:
        form = page.get_by_test_id(f"department-form-{slug}")
        form.get_by_label("Shares idle GPUs with the organisation").check()
        if weight:
            form.get_by_label("Weight (0 to 100)").fill(weight)
        form.get_by_role("button", name=f"Save {name}").click()
        expect(page.locator(".messages")).to_contain_text(
            f"{name} shares idle GPUs with the organisation"
        )
    expect(product.get_by_test_id("department-shares")).to_have_text("Yes")
    expect(product.get_by_test_id("department-weight")).to_have_text("2")
    assert AuditEvent.objects.filter(verb="department.fair_share", actor=w["admin"]).count() == 2
    live = w["sim"].kube.get("kueue.x-k8s.io/v1beta2", "Cohort", cohort_name(w["product"]))
    assert live["spec"] == {"parentName": ORGANISATION_COHORT, "fairSharing": {"weight": "2"}}
    page.get_by_role("button", name="Log out").click()

    login("carol", PASSWORD)
    ask_for_six()
    expect(page.locator(".messages")).to_contain_text("submitted")
    job = Job.objects.get(team=w["recsys"])
    assert sync_until(job, Job.State.RUNNING).state == Job.State.RUNNING
    page.reload()
    expect(page.get_by_test_id("job-state")).to_have_text("Running")
    page.get_by_role("button", name="Log out").click()

    def borrowing():
        cluster_check_drift(cluster_id=w["cluster"].pk)
        return department_sharing(departments=[w["product"]])[0]["share"] == 50

    assert wait_until(borrowing, timeout=15)
    login("pablo", PASSWORD)  # Product's manager
    page.goto("/departments/")
    row = page.get_by_test_id("department-product")
    expect(row.get_by_test_id("department-pools")).to_contain_text("a100: 6 / 4")
    expect(row.get_by_test_id("department-pools")).to_contain_text(
        "2 borrowed from other departments"
    )
    expect(row.get_by_test_id("department-share")).to_contain_text("50 on")
    expect(page.get_by_role("button", name="Save Product")).to_have_count(0)
