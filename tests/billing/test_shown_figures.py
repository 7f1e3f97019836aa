"""GPU-hours on pages are rounded to what a reader needs (two decimals); the exports keep them
exact, and the Excel workbook holds numbers with number formats, not bare values."""

import csv
import io
from datetime import UTC, datetime
from decimal import Decimal

from django.urls import reverse
from openpyxl import load_workbook

from tests.factories import UsageHourFactory


def _odd_minutes(october):
    """1,000 more GPU-seconds of vision's job: 10.2778 GPU-hours in all, not a round figure."""
    UsageHourFactory(
        hour=datetime(2026, 10, 21, 0, tzinfo=UTC), cluster=october["cluster"], gpu_uuid="GPU-a",
        pod="train-0", team=october["vision"], job=october["job"], gpu_model=october["a100"],
        pool=october["pool"], seconds=1000, seconds_busy=500,
    )  # fmt: skip


def test_pages_round_gpu_hours_and_the_csv_keeps_them_exact(october, client):
    _odd_minutes(october)
    client.force_login(october["frank"])
    page = client.get(reverse("billing-report", args=["2026-10"])).content.decode()
    assert 'id="total-allocated">15.28<' in page  # 10.2778 + 4 + 1 (unattributed)
    assert "10.2778" not in page and ">10.28<" in page
    team = client.get(reverse("billing-team", args=["vision"]), {"month": "2026-10"})
    assert "10.2778" not in team.content.decode()
    rows = list(csv.DictReader(io.StringIO(
        client.get(reverse("billing-export", args=["2026-10", "csv"])).content.decode()
    )))  # fmt: skip
    vision = next(r for r in rows if r["team"] == "vision")
    assert vision["gpu_hours_allocated"] == "10.2778"


def test_the_workbook_holds_numbers_with_their_formats(october, client):
    _odd_minutes(october)
    client.force_login(october["frank"])
    book = load_workbook(io.BytesIO(
        client.get(reverse("billing-export", args=["2026-10", "xlsx"])).content
    ))  # fmt: skip
    ws = book.active
    header = [c.value for c in ws[1]]
    assert all(c.font.bold for c in ws[1]) and ws.freeze_panes == "A2"
    col = {name: header.index(name) for name in header}
    vision = next(row for row in ws.iter_rows(min_row=2) if row[col["team"]].value == "vision")
    hours, cost, util = (vision[col[n]] for n in ("gpu_hours_allocated", "cost", "util_mean"))
    assert isinstance(hours.value, int | float | Decimal)
    assert Decimal(str(hours.value)) == Decimal("10.2778")  # exact, as in the CSV
    assert hours.number_format == "#,##0.0000"
    assert cost.number_format == "#,##0.00" and isinstance(cost.value, int | float | Decimal)
    assert util.number_format == "0.0"
    idle = book["Idle capacity"]
    assert idle.cell(row=2, column=4).number_format == "#,##0.0000"
    assert idle.cell(row=2, column=5).number_format == "#,##0.00"
