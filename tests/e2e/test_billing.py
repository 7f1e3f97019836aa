"""Billing journeys in Chromium: finance pulls last month's report and CSV; edits prices."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from django.utils import timezone

from billing.models import Budget, MonthlyReport, UsageHour
from billing.periods import month_start
from fleet.models import Cluster, GpuModel, GpuPrice
from queues.models import AuditEvent
from tests.billing.conftest import make_job, make_price
from tests.factories import PASSWORD

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def last_month_usage(world):
    cluster = Cluster.objects.create(name="prod", kubeconfig_path="/dev/null", is_default=True)
    a100 = GpuModel.objects.create(name="A100", dcgm_model_names=["NVIDIA A100"])
    l4 = GpuModel.objects.create(name="L4", dcgm_model_names=["NVIDIA L4"])
    make_price(a100, "3.1000")
    make_price(l4, "0.7500")
    last = month_start(month_start(timezone.now()) - timedelta(days=1))
    start = datetime(last.year, last.month, 1, tzinfo=UTC)
    plan = [(world["vision"], a100, 7, "GPU-a"), (world["nlp"], l4, 13, "GPU-b"),
            (world["recsys"], a100, 3, "GPU-c")]  # fmt: skip
    for team, model, hours, uuid in plan:
        job = make_job(team, world["admin"], name=f"{team.slug}-train", pod=f"{team.slug}-0")
        for h in range(hours):
            UsageHour.objects.create(
                hour=start + timedelta(hours=h), cluster=cluster, gpu_uuid=uuid,
                pod=f"{team.slug}-0", namespace=team.namespace, team=team, job=job,
                gpu_model=model, model_name=model.name, seconds_allocated=3600,
                seconds_busy=2000, util_mean=55.5, sample_count=120, expected_samples=120,
            )  # fmt: skip
    return {"month": last, "a100": a100, **world}


def test_finance_downloads_last_months_csv_matching_the_page(page, login, last_month_usage):
    login("frank", PASSWORD)
    page.get_by_role("link", name="Billing").first.click()
    page.wait_for_selector("#total-cost")
    last = last_month_usage["month"]
    page.get_by_role("link", name=f"← {last:%B %Y}").click()
    page.wait_for_url(f"**/billing/reports/{last:%Y-%m}/")
    shown_cost = Decimal(page.locator("#total-cost").inner_text())
    shown_hours = Decimal(page.locator("#total-allocated").inner_text())
    # 7 × 3.10 + 13 × 0.75 + 3 × 3.10 = 40.75
    assert shown_cost == Decimal("40.75") and shown_hours == Decimal("23.0000")
    assert page.locator("#teams-table tr[data-team]").count() == 3
    with page.expect_download() as info:
        page.locator("#export-csv").click()
    download = info.value
    assert download.suggested_filename == f"gpu-report-{last:%Y-%m}.csv"
    text = Path(download.path()).read_text(encoding="utf-8")
    rows = list(csv.DictReader(io.StringIO(text)))
    total = next(r for r in rows if r["team"] == "TOTAL")
    lines = [r for r in rows if r["team"] != "TOTAL"]
    assert Decimal(total["cost"]) == shown_cost
    assert sum(Decimal(r["cost"]) for r in lines) == shown_cost
    assert Decimal(total["gpu_hours_allocated"]) == shown_hours
    page_costs = {
        row.get_attribute("data-team"): Decimal(row.locator(".team-cost").inner_text())
        for row in page.locator("#teams-table tr[data-team]").all()
    }
    assert page_costs == {r["team"]: Decimal(r["cost"]) for r in lines}


def test_finance_adds_a_price_and_sees_history(page, login, last_month_usage):
    login("frank", PASSWORD)
    page.goto("/billing/prices/")
    page.get_by_label("GPU model").select_option(label="A100")
    page.get_by_label("Price per GPU-hour").fill("2.5000")
    page.get_by_label("In force from (UTC)").fill("2030-01-01T00:00")
    page.get_by_role("button", name="Add price").click()
    page.wait_for_selector("text=Price added.")
    assert page.locator("#price-table tbody tr", has_text="A100").count() == 2
    assert GpuPrice.objects.get(
        gpu_model=last_month_usage["a100"], effective_to=None
    ).price_per_hour == Decimal("2.5")
    # A price that overlaps is refused with a message on the form.
    page.get_by_label("GPU model").select_option(label="A100")
    page.get_by_label("Price per GPU-hour").fill("9")
    page.get_by_label("In force from (UTC)").fill("2029-06-01T00:00")
    page.get_by_label("Until (UTC, exclusive)").fill("2030-06-01T00:00")
    page.get_by_role("button", name="Add price").click()
    page.wait_for_selector("text=Overlaps the price")


def test_member_sees_only_own_team(page, login, last_month_usage):
    login("alice", PASSWORD)
    last = last_month_usage["month"]
    page.goto(f"/billing/reports/{last:%Y-%m}/")
    assert page.locator("#teams-table tr[data-team]").count() == 1
    assert page.locator("text=Idle capacity per pool").count() == 0
    response = page.goto("/billing/teams/nlp/")
    assert response.status == 404


def test_finance_sets_a_budget_and_the_team_sees_the_alert(
    page, login, last_month_usage, browser, live_server
):

    vision = last_month_usage["vision"]
    this_month = month_start(timezone.now())
    start = datetime(this_month.year, this_month.month, 1, tzinfo=UTC)
    UsageHour.objects.create(
        hour=start, cluster=Cluster.objects.get(name="prod"), gpu_uuid="GPU-a", pod="now-0",
        namespace=vision.namespace, team=vision, gpu_model=last_month_usage["a100"],
        seconds_allocated=3600, seconds_busy=1800,
    )  # fmt: skip
    login("frank", PASSWORD)
    page.goto("/billing/budgets/")
    page.get_by_label("Team").select_option(label="Vision")
    page.get_by_label("Month").fill(f"{this_month:%Y-%m}")
    page.get_by_label("Amount").fill("5.00")
    page.get_by_label("Thresholds").fill("50, 80, 100")
    page.get_by_role("button", name="Save budget").click()
    page.wait_for_selector("text=Budget for Vision saved.")
    budget = Budget.objects.get(team=vision, month=this_month)
    assert budget.alerts_sent == [50] and not budget.held  # 3.10 of 5.00
    # Bad input is a form error, not a 500.
    page.get_by_label("Team").select_option(label="Vision")
    page.get_by_label("Month").fill(f"{this_month:%Y-%m}")
    page.get_by_label("Amount").fill("-3")
    page.get_by_label("Thresholds").fill("fifty")
    page.get_by_role("button", name="Save budget").click()
    page.wait_for_selector("text=Use whole numbers")

    member = browser.new_context(base_url=live_server.url)
    other = member.new_page()
    other.goto("/accounts/login/")
    other.get_by_label("Username").fill("alice")
    other.get_by_label("Password").fill(PASSWORD)
    other.get_by_role("button", name="Log in").click()
    other.wait_for_url("**/")
    other.goto("/billing/teams/vision/")
    assert "used 62.0 % of its 5.00 EUR budget" in other.locator(".billing-alert").inner_text()
    member.close()


def test_finance_closes_the_month_and_an_admin_reopens_it(page, login, last_month_usage):

    last = last_month_usage["month"]
    login("frank", PASSWORD)
    page.goto(f"/billing/reports/{last:%Y-%m}/")
    page.get_by_role("button", name="Close month").click()
    page.wait_for_selector("text=is closed; its figures are frozen")
    assert page.locator("#report-state").inner_text() == "Closed"
    assert page.get_by_role("button", name="Reopen").count() == 0  # finance cannot reopen
    report = MonthlyReport.objects.get(month=last)
    assert report.snapshot["totals"]["cost"] == "40.75" and report.price_book_version

    page.context.clear_cookies()
    login("admin", PASSWORD)
    page.goto(f"/billing/reports/{last:%Y-%m}/")
    page.get_by_label("Reason for reopening").fill("late usage from a restored exporter")
    page.get_by_role("button", name="Reopen").click()
    page.wait_for_selector("text=is open again")
    assert page.locator("#report-state").inner_text().startswith("Open")
    event = AuditEvent.objects.get(verb="report.reopen")
    assert event.message == "late usage from a restored exporter"
    assert event.before["total_cost"] == "40.75"


def test_finance_sees_the_ledger_lines_on_a_closed_month(page, login, last_month_usage):
    from billing.models import LedgerHour
    from fleet.models import NodePool

    w = last_month_usage
    last = w["month"]
    cluster = Cluster.objects.get(name="prod")
    pool = NodePool.objects.create(cluster=cluster, name="a100", gpu_model=w["a100"])
    start = datetime(last.year, last.month, 2, 9, tzinfo=UTC)
    # vision borrowed 3 GPU-hours from nlp's idle quota.
    for team, borrowed, lent in ((w["vision"], 3 * 3600, 0), (w["nlp"], 0, 3 * 3600)):
        LedgerHour.objects.create(
            hour=start, cluster=cluster, pool=pool, team=team,
            borrowed_seconds=borrowed, lent_seconds=lent, samples=60,
        )  # fmt: skip
    login("frank", PASSWORD)
    page.goto("/billing/ledger/")
    page.get_by_label("Rate per borrowed GPU-hour").fill("-1")
    page.get_by_role("button", name="Set rate from now on").click()
    page.wait_for_selector(".field-error")
    page.get_by_label("Rate per borrowed GPU-hour").fill("0.80")
    page.get_by_role("button", name="Set rate from now on").click()
    page.wait_for_selector("text=Borrowing rate set to 0.8000")
    # The rate applies from now on: last month's hours are priced at no rate (0) ...
    page.goto(f"/billing/ledger/?month={last:%Y-%m}")
    row = page.locator('#ledger-table tr[data-team="vision"]')
    assert row.locator("td").nth(1).inner_text() == "3.00"  # GPU-hours shown to two decimals
    # ... so finance back-dates a rate for last month through the API, then closes it.
    from billing.services.ledger import ledger_rate_set

    ledger_rate_set(actor=w["frank"], rate_per_gpu_hour="0.50", effective_from=start)
    page.goto(f"/billing/reports/{last:%Y-%m}/")
    page.get_by_role("button", name="Close month").click()
    page.wait_for_selector("text=is closed; its figures are frozen")
    lines = page.locator("#ledger-lines")
    assert lines.locator('tr[data-team="vision"] .ledger-charge').inner_text() == "1.50"
    assert lines.locator('tr[data-team="nlp"] .ledger-credit').inner_text() == "− 1.50"
    # nlp's 13 L4 hours cost 9.75; the credit comes off what it owes.
    assert lines.locator('tr[data-team="nlp"] .amount-due').inner_text() == "8.25 EUR"
    page.get_by_role("link", name="Borrowing ledger").click()
    page.wait_for_selector("#ledger-closed")
    assert page.locator('#ledger-table tr[data-team="nlp"] .ledger-net').inner_text() == "-1.50"


def test_finance_downloads_the_workbook_with_numbers_the_page_rounds(page, login, last_month_usage):
    """The page shows GPU-hours to two decimals; the Excel file holds them exact, as numbers
    with number formats (not text, not bare values)."""
    from openpyxl import load_workbook

    w, last = last_month_usage, last_month_usage["month"]
    UsageHour.objects.create(
        hour=datetime(last.year, last.month, 2, tzinfo=UTC), cluster=Cluster.objects.get(),
        gpu_uuid="GPU-a", pod="vision-0", namespace=w["vision"].namespace, team=w["vision"],
        job=UsageHour.objects.filter(team=w["vision"]).first().job, gpu_model=w["a100"],
        model_name="A100", seconds_allocated=1000, seconds_busy=500, util_mean=50.0,
        sample_count=33, expected_samples=33,
    )  # fmt: skip
    login("frank", PASSWORD)
    page.goto(f"/billing/reports/{last:%Y-%m}/")
    assert page.locator("#total-allocated").inner_text() == "23.28"  # 23.2778 GPU-hours
    assert "23.2778" not in page.locator("main").inner_text()
    with page.expect_download() as info:
        page.get_by_role("link", name="Excel").click()
    assert info.value.suggested_filename == f"gpu-report-{last:%Y-%m}.xlsx"
    book = load_workbook(io.BytesIO(Path(info.value.path()).read_bytes()))
    ws = book.active
    header = [c.value for c in ws[1]]
    vision = next(r for r in ws.iter_rows(min_row=2) if r[header.index("team")].value == "vision")
    hours = vision[header.index("gpu_hours_allocated")]
    cost = vision[header.index("cost")]
    assert isinstance(hours.value, int | float) and round(hours.value, 4) == 7.2778
    assert hours.number_format == "#,##0.0000"
    assert isinstance(cost.value, int | float) and cost.number_format == "#,##0.00"
