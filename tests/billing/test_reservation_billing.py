"""Advance reservations on the bill: held capacity priced hour by hour by the team's policy, a
line per reservation in the month's report and in every export."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from billing.exports import report_csv, report_focus_csv
from billing.models import TeamBillingPolicy
from billing.selectors.reports import build_report
from billing.selectors.reservations import reservation_quote
from fleet.models import Cluster, GpuModel, GpuPrice, NodePool
from queues.models import Reservation
from queues.selectors.reservations import reservation_price

MONTH = datetime(2026, 3, 1, tzinfo=UTC)
S = Reservation.State


@pytest.fixture
def priced(world):
    cluster = Cluster.objects.create(name="prod", kubeconfig_path="/dev/null", is_default=True)
    model = GpuModel.objects.create(name="H100")
    pool = NodePool.objects.create(cluster=cluster, name="h100", gpu_model=model)
    GpuPrice.objects.create(gpu_model=model, price_per_hour=Decimal("3.0000"), currency="EUR",
                            effective_from=MONTH - timedelta(days=30),
                            effective_to=MONTH + timedelta(days=10))  # fmt: skip
    # From 11 March the price goes up: each hour is priced at the price in force at its start.
    GpuPrice.objects.create(gpu_model=model, price_per_hour=Decimal("4.0000"), currency="EUR",
                            effective_from=MONTH + timedelta(days=10))  # fmt: skip
    return {**world, "pool": pool}


def _reservation(w, *, start, hours, gpus=4, state=S.ENDED, team="vision", **kw):
    kw.setdefault("activated_at", start)
    return Reservation.objects.create(
        team=w[team], pool=w["pool"], gpus=gpus, starts_at=start,
        ends_at=start + timedelta(hours=hours), reason="deadline", state=state,
        requested_by=w["bob"], **kw,
    )  # fmt: skip


def test_held_capacity_is_priced_hour_by_hour_across_a_price_change(priced):
    # 4 GPUs from 10 March 22:00 to 11 March 02:00: 2 h at 3.00 and 2 h at 4.00.
    r = _reservation(priced, start=MONTH + timedelta(days=9, hours=22), hours=4)
    quote = reservation_quote(reservation=r)
    assert quote["gpu_hours_held"] == "16.0000"
    assert quote["cost"] == "56.00"
    assert quote["basis"] == "allocated"


@pytest.mark.parametrize(
    ("basis", "weight", "cost"),
    [("allocated", "0.500", "24.00"), ("blend", "0.250", "6.00"), ("used", "0.500", "0.00")],
)
def test_the_teams_policy_weighs_held_capacity(priced, basis, weight, cost):
    TeamBillingPolicy.objects.create(team=priced["vision"], basis=basis, blend_weight=weight)
    r = _reservation(priced, start=MONTH + timedelta(days=1), hours=2, gpus=4)  # 8 GPU-h × 3
    assert reservation_quote(reservation=r)["cost"] == cost
    # The pages ask through queues' signal, which billing answers.
    price = reservation_price(reservation=r)
    assert price["amount"] == Decimal(cost) and price["basis"] == basis


def test_the_months_report_has_a_line_per_reservation_split_at_the_month(priced):
    w = priced
    # 31 March 22:00 to 1 April 04:00: 2 of its 6 hours are March's.
    across = _reservation(w, start=MONTH + timedelta(days=30, hours=22), hours=6, gpus=2)
    inside = _reservation(w, start=MONTH + timedelta(days=2), hours=3, gpus=1, team="nlp")
    # Never opened: cancelled before its window, or still to come: not billed.
    _reservation(w, start=MONTH + timedelta(days=3), hours=3, state=S.CANCELLED, activated_at=None)
    _reservation(w, start=MONTH + timedelta(days=4), hours=3, state=S.APPROVED, activated_at=None)
    _reservation(w, start=MONTH + timedelta(days=5), hours=3, state=S.ENDED, activated_at=None)
    report = build_report(month=MONTH.date())
    rows = {t["team"]: t for t in report["teams"]}
    vision = rows["vision"]["reservations"]
    assert [line["reservation_id"] for line in vision["lines"]] == [across.pk]
    assert vision["lines"][0]["gpu_hours_held"] == "4.0000"  # 2 GPUs × 2 h
    assert vision["charge"] == "16.00"  # at 4.00
    assert rows["nlp"]["reservations"]["charge"] == "9.00"  # 1 GPU × 3 h × 3.00
    assert report["totals"]["reservation_charges"] == "25.00"
    assert rows["vision"]["amount_due"] == str(Decimal(rows["vision"]["cost"]) + Decimal("16.00"))
    assert (
        build_report(month=datetime(2026, 4, 1).date())["teams"][0]["reservations"]["lines"][0][
            "gpu_hours_held"
        ]
        == "8.0000"
    )  # April: the other 4 hours

    rows_csv = list(csv.DictReader(io.StringIO(report_csv(report))))
    held = [r for r in rows_csv if r["gpu_model"].startswith(f"reservation #{inside.pk}")]
    assert len(held) == 1 and held[0]["cost"] == "9.00" and held[0]["team"] == "nlp"
    assert held[0]["gpu_hours_allocated"] == "3.0000"
    total = next(r for r in rows_csv if r["team"] == "TOTAL")
    lines = [r for r in rows_csv if r["team"] != "TOTAL"]
    assert sum(Decimal(r["cost"]) for r in lines) == Decimal(total["cost"])
    focus = list(csv.DictReader(io.StringIO(report_focus_csv(report))))
    charge = next(r for r in focus if r["SkuId"] == f"reservation-{across.pk}")
    assert charge["BilledCost"] == "16.00" and charge["ServiceName"] == "GPU reservation"
    assert charge["ChargePeriodStart"].startswith("2026-03-31T22:00")
    assert charge["ChargePeriodEnd"].startswith("2026-04-01T00:00")
