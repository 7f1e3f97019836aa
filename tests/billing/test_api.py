"""Billing API and pages: figures, scoping, bad input, exports, closing a month."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.template import Context, Template
from django.urls import reverse
from django.utils import timezone
from openpyxl import load_workbook

from billing.models import Budget, MonthlyReport, UsageDay, UsageDayState, UsageHour
from billing.periods import month_start
from billing.selectors.reports import build_report
from billing.services.rollups import usage_day_refresh, usage_days_mark_dirty
from queues.models import AuditEvent
from tests.billing.conftest import make_job, make_price
from tests.factories import UsageHourFactory

OCT = datetime(2026, 10, 1, tzinfo=UTC)
XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"


def test_price_change_mid_month_splits_cost(october, api_as):
    body = api_as(october["frank"]).get(reverse("billing-api-report", args=["2026-10"])).json()
    teams = {t["team"]: t for t in body["teams"]}
    # 5 h × 3.00 + 5 h × 4.00 = 35.00
    assert teams["vision"]["cost"] == "35.00"
    assert teams["vision"]["gpu_hours_allocated"] == "10.0000"
    assert teams["vision"]["gpu_hours_used"] == "5.0000"
    assert teams["vision"]["top_jobs"][0]["name"] == "big-train"
    assert teams["nlp"]["cost"] == "4.00" and teams["nlp"]["flags"]["gap"] == 1
    assert body["finance_totals"]["idle_cost"] == "6.00"  # 2 idle A100 hours at 3.00
    assert body["finance_totals"]["unattributed_cost"] == "1.00"
    assert body["totals"]["cost"] == "40.00"
    pools = {p["pool"]: p for p in body["pools"]}
    assert pools["a100"]["cost"] == "35.00" and pools["a100"]["idle_cost"] == "6.00"
    assert pools["(no pool)"]["cost"] == "5.00"  # nlp's 4.00 and the stray pod's 1.00


def test_usage_api_for_member(october, api_as):
    url = reverse("billing-api-usage")
    r = api_as(october["alice"]).get(
        url, {"team": "vision", "start": "2026-10-01T00:00:00Z", "end": "2026-10-15T00:00:00Z"}
    )
    assert r.status_code == 200, r.content
    body = r.json()
    assert body["models"][0]["gpu_model"] == "A100"
    assert body["totals"]["gpu_hours_allocated"] == "5.0000"
    assert body["totals"]["cost"] == "15.00"


def test_usage_api_answers_the_window_it_summed(october, api_as):
    """Usage is kept per hour: a window that starts or ends inside an hour sums whole hours,
    and the answer says which (the question is echoed beside it)."""
    url = reverse("billing-api-usage")
    query = {"team": "vision", "start": "2026-10-01T00:20:00Z", "end": "2026-10-14T23:10:00Z"}
    body = api_as(october["alice"]).get(url, query).json()
    assert body["start"] == "2026-10-01T00:00:00+00:00"
    assert body["end"] == "2026-10-15T00:00:00+00:00"
    assert body["requested_start"] == "2026-10-01T00:20:00+00:00"
    assert body["requested_end"] == "2026-10-14T23:10:00+00:00"
    whole = {"team": "vision", "start": "2026-10-01T00:00:00Z", "end": "2026-10-15T00:00:00Z"}
    exact = api_as(october["alice"]).get(url, whole).json()
    assert exact["totals"] == body["totals"]
    assert exact["end"] == exact["requested_end"] == "2026-10-15T00:00:00+00:00"


def test_unknown_and_unseen_teams_answer_alike(october, api_as):
    """A team that does not exist and one the caller may not see: the same 404, so the answer
    never tells which teams exist."""
    client = api_as(october["alice"])
    window = {"start": "2026-10-01T00:00:00Z", "end": "2026-10-02T00:00:00Z"}
    unknown = client.get(reverse("billing-api-usage"), {"team": "nope", **window})
    unseen = client.get(reverse("billing-api-usage"), {"team": "recsys", **window})
    assert unknown.status_code == unseen.status_code == 404
    assert unknown.json()["detail"].replace("nope", "X") == unseen.json()["detail"].replace(
        "recsys", "X"
    )


@pytest.mark.parametrize(
    "params, field",
    [
        ({"team": "vision", "start": "yesterday", "end": "2026-10-02T00:00:00Z"}, "start"),
        (
            {"team": "vision", "start": "2026-10-02T00:00:00Z", "end": "2026-10-01T00:00:00Z"},
            "end",
        ),  # fmt: skip
        ({"start": "2026-10-01T00:00:00Z", "end": "2026-10-02T00:00:00Z"}, "team"),
    ],
)
def test_usage_api_bad_input(october, api_as, params, field):
    r = api_as(october["alice"]).get(reverse("billing-api-usage"), params)
    assert r.status_code == 400
    assert field in r.json()


def test_other_teams_are_404(october, api_as):
    params = {"team": "nlp", "start": "2026-10-01T00:00:00Z", "end": "2026-10-02T00:00:00Z"}
    assert api_as(october["alice"]).get(reverse("billing-api-usage"), params).status_code == 404
    client = api_as(october["alice"])
    assert client.get(reverse("billing-team", args=["nlp"])).status_code == 404
    assert client.get(reverse("billing-team", args=["vision"])).status_code == 200


def test_member_report_is_scoped(october, api_as):
    body = api_as(october["alice"]).get(reverse("billing-api-report", args=["2026-10"])).json()
    assert [t["team"] for t in body["teams"]] == ["vision"]
    assert "idle_capacity" not in body and "unattributed" not in body
    maria = api_as(october["maria"]).get(reverse("billing-api-report", args=["2026-10"])).json()
    assert sorted(t["team"] for t in maria["teams"]) == ["nlp", "vision"]


def test_report_csv_xlsx_focus(october, api_as):
    client = api_as(october["frank"])
    url = reverse("billing-api-report", args=["2026-10"])
    r = client.get(url, {"format": "csv"})
    assert r.status_code == 200 and r["Content-Type"].startswith("text/csv")
    assert r["Content-Disposition"] == 'attachment; filename="gpu-report-2026-10.csv"'
    rows = list(csv.DictReader(io.StringIO(r.content.decode())))
    lines = [row for row in rows if row["team"] != "TOTAL"]
    total = next(row for row in rows if row["team"] == "TOTAL")
    assert sum(Decimal(row["cost"]) for row in lines) == Decimal(total["cost"]) == Decimal("40.00")
    r = client.get(url, {"format": "xlsx"})
    assert r["Content-Type"] == XLSX
    assert r["Content-Disposition"] == 'attachment; filename="gpu-report-2026-10.xlsx"'
    ws = load_workbook(io.BytesIO(r.content)).active
    assert ws.cell(row=1, column=1).value == "month"
    r = client.get(url, {"format": "focus"})
    assert r["Content-Disposition"] == 'attachment; filename="gpu-report-2026-10-focus.csv"'
    focus = list(csv.DictReader(io.StringIO(r.content.decode())))
    assert {"BilledCost", "ChargePeriodStart", "ConsumedQuantity", "SubAccountName"} <= set(
        focus[0]
    )
    assert sum(Decimal(row["BilledCost"]) for row in focus) == Decimal("39.00")  # teams only


def test_report_bad_month_is_400(october, api_as):
    r = api_as(october["frank"]).get(reverse("billing-api-report", args=["2026-13"]))
    assert r.status_code == 400 and "month" in r.json()


def test_close_freezes_and_reopen_needs_admin(october, api_as):
    client = api_as(october["frank"])
    close = reverse("billing-api-report-action", args=["2026-10", "close"])
    assert client.post(close).status_code == 200
    report = MonthlyReport.objects.get(month=OCT.date())
    assert report.state == "closed" and report.price_book_version.startswith("v3-")
    # Later usage or price edits do not change the closed month.
    UsageHourFactory(cluster=october["cluster"], hour=datetime(2026, 10, 30, tzinfo=UTC),
                     gpu_uuid="GPU-z", pod="late", team=october["vision"],
                     gpu_model=october["a100"])  # fmt: skip
    body = client.get(reverse("billing-api-report", args=["2026-10"])).json()
    assert body["closed"] and body["totals"]["cost"] == "40.00"
    reopen = reverse("billing-api-report-action", args=["2026-10", "reopen"])
    assert client.post(reopen).status_code == 403  # finance cannot reopen
    admin = api_as(october["admin"])
    assert admin.post(reopen, {"reason": "late usage"}).status_code == 200
    assert AuditEvent.objects.filter(verb="report.reopen").exists()
    body = admin.get(reverse("billing-api-report", args=["2026-10"])).json()
    assert not body["closed"] and body["totals"]["cost"] == "44.00"


def test_prices_api_permissions_and_overlap(october, api_as):
    url = reverse("billing-price-list")
    data = {"gpu_model": "L4", "price_per_hour": "1.5000", "currency": "EUR",
            "effective_from": "2026-11-01T00:00:00Z"}  # fmt: skip
    assert api_as(october["alice"]).post(url, data).status_code == 403
    assert api_as(october["maria"]).post(url, data).status_code == 403
    frank = api_as(october["frank"])
    r = frank.post(url, data)
    assert r.status_code == 201, r.content
    # The open-ended 1.00 price now ends where 1.50 begins; history is kept.
    listed = [p for p in frank.get(url).json()["results"] if p["gpu_model"] == "L4"]
    assert len(listed) == 2
    bad = {**data, "effective_from": "2026-10-05T00:00:00Z",
           "effective_to": "2026-11-05T00:00:00Z"}  # fmt: skip
    r = frank.post(url, bad)
    assert r.status_code == 400 and "effective_from" in r.json()
    r = frank.post(url, {**data, "price_per_hour": "-1"})
    assert r.status_code == 400 and "price_per_hour" in r.json()


def test_budgets_api(october, api_as):
    url = reverse("billing-budget-list")
    data = {"team": "vision", "month": "2026-10", "amount": "100.00", "enforce": False}
    assert api_as(october["alice"]).post(url, data, format="json").status_code == 403
    frank = api_as(october["frank"])
    r = frank.post(url, data, format="json")
    assert r.status_code == 201, r.content
    assert r.json()["last_spent"] == "35.00"
    assert frank.post(url, {**data, "month": "10/2026"}, format="json").status_code == 400
    assert frank.post(url, {**data, "team": "ghost"}, format="json").status_code == 400
    listed = api_as(october["carol"]).get(url).json()["results"]
    assert listed == []  # carol (nlp) does not see vision's budget


def test_pages_render_for_finance(october, client, django_assert_max_num_queries):
    client.force_login(october["frank"])
    with django_assert_max_num_queries(31):  # 30 before the reservations' section (#35)
        r = client.get(reverse("billing-report", args=["2026-10"]))
    assert r.status_code == 200
    html = r.content.decode()
    assert 'id="total-cost">40.00<' in html and "<svg" in html and "Idle capacity" in html
    for name in ("billing-prices", "billing-budgets"):
        assert client.get(reverse(name)).status_code == 200
    r = client.get(reverse("billing-export", args=["2026-10", "csv"]))
    assert r.status_code == 200 and b"TOTAL" in r.content
    assert r["Content-Disposition"] == 'attachment; filename="gpu-report-2026-10.csv"'
    r = client.get(reverse("billing-export", args=["2026-10", "xlsx"]))
    assert r["Content-Type"] == XLSX
    assert load_workbook(io.BytesIO(r.content)).active.cell(row=1, column=1).value == "month"
    r = client.get(reverse("billing-export", args=["2026-10", "focus"]))
    assert r["Content-Disposition"] == 'attachment; filename="gpu-report-2026-10-focus.csv"'
    assert client.get(reverse("billing-export", args=["2026-10", "pdf"])).status_code == 404


def test_daily_summaries_give_the_same_report(october):
    """Reports read clean past days from UsageDay; the figures equal those from the hours."""
    hourly = build_report(month=OCT.date())
    hours = list(UsageHour.objects.values_list("cluster_id", "hour"))
    for cluster_id, hour in hours:
        usage_days_mark_dirty(cluster_id=cluster_id, hours=[hour])
    for cluster_id, day in UsageDayState.objects.values_list("cluster_id", "day"):
        usage_day_refresh(cluster_id=cluster_id, day=day)
    assert UsageDay.objects.count() < UsageHour.objects.count()
    daily = build_report(month=OCT.date())
    assert daily == hourly
    # A price period that starts inside a day makes that day hourly again, and still exact:
    # the 1-hour MIG price on the 11th does not touch the whole-GPU rows of that day.
    make_price(october["l4"], "2.0000", datetime(2026, 10, 11, 2, tzinfo=UTC),
               datetime(2026, 10, 11, 3, tzinfo=UTC), profile="1g.5gb")  # fmt: skip
    assert build_report(month=OCT.date())["totals"] == hourly["totals"]


def test_queue_wait_median_and_p90(october):

    admitted = datetime(2026, 10, 3, 12, tzinfo=UTC)
    for i, wait in enumerate((10, 20, 30, 40, 100)):
        make_job(october["vision"], october["alice"], name=f"w{i}",
                 queued_at=admitted - timedelta(seconds=wait), admitted_at=admitted)  # fmt: skip
    vision = next(t for t in build_report(month=OCT.date())["teams"] if t["team"] == "vision")
    assert vision["queue_wait_median_seconds"] == 30.0
    assert vision["queue_wait_p90_seconds"] == 76.0  # 40 + 0.6 × (100 − 40)


def test_team_summary_tag_for_the_team_page(october, rf):
    """{% billing_team_summary team %}: what the team detail page includes."""

    vision = october["vision"]
    Budget.objects.create(team=vision, month=month_start(timezone.now()), amount=Decimal("100"),
                          thresholds=[50, 80, 100])  # fmt: skip
    html = Template("{% load billing_tags %}{% billing_team_summary team %}").render(
        Context({"team": vision})
    )
    assert "GPU spend this month" in html and "0.0 % of 100" in html
    assert reverse("billing-team", args=["vision"]) in html
