"""Reading the borrowing and lending ledger: a month per team and pool, priced at the rate in
force at each hour (billing.services.ledger explains how borrowing and lending are measured)."""

from __future__ import annotations

from collections import defaultdict
from datetime import date, datetime
from decimal import Decimal

from django.db.models import Sum

from billing.models import LedgerHour, LedgerRate
from billing.periods import month_bounds
from billing.pricing import cents, cost_of, gpu_hours


def rate_history() -> list[LedgerRate]:
    """Every rate, newest first."""
    return list(LedgerRate.objects.select_related("created_by"))


def current_rate(at: datetime | None = None) -> LedgerRate | None:
    qs = LedgerRate.objects.all()
    if at is not None:
        qs = qs.filter(effective_from__lte=at)
    return qs.first()


def _rate_at(rates: list[LedgerRate], hour: datetime) -> Decimal:
    """The rate in force at the start of the hour (rates newest first); none set is zero."""
    for rate in rates:
        if rate.effective_from <= hour:
            return rate.rate_per_gpu_hour
    return Decimal(0)


def ledger_month(*, month: date, team_ids: list[int] | None = None) -> dict[int, dict]:
    """Per team id: borrowed and lent GPU-hours of the month, the charge for what it borrowed
    and the credit for what it lent (each rounded once, to cents), and the pools behind them."""
    start, end = month_bounds(month)
    rows = LedgerHour.objects.filter(hour__gte=start, hour__lt=end)
    if team_ids is not None:
        rows = rows.filter(team_id__in=team_ids)
    rates = list(LedgerRate.objects.filter(effective_from__lt=end))
    # Hours that share a rate are summed in the database; one row per team × pool × rate span.
    bounds = sorted({r.effective_from for r in rates if r.effective_from > start})
    spans = list(zip([start, *bounds], [*bounds, end], strict=True))
    acc: dict[int, dict] = {}
    pools: dict[int, dict] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for lo, hi in spans:
        rate = _rate_at(rates, lo)
        grouped = (
            rows.filter(hour__gte=lo, hour__lt=hi)
            .values("team_id", "pool_id", "pool__name")
            .annotate(b=Sum("borrowed_seconds"), lent=Sum("lent_seconds"))
        )
        for g in grouped:
            row = acc.setdefault(
                g["team_id"], {"borrowed": 0, "lent": 0, "charge": Decimal(0), "credit": Decimal(0)}
            )
            row["borrowed"] += g["b"] or 0
            row["lent"] += g["lent"] or 0
            row["charge"] += cost_of(g["b"] or 0, rate)
            row["credit"] += cost_of(g["lent"] or 0, rate)
            pool = pools[g["team_id"]][g["pool__name"]]
            pool[0] += g["b"] or 0
            pool[1] += g["lent"] or 0
    out = {}
    for team_id, row in acc.items():
        if not row["borrowed"] and not row["lent"]:
            continue
        charge, credit = cents(row["charge"]), cents(row["credit"])
        out[team_id] = {
            "gpu_hours_borrowed": str(gpu_hours(row["borrowed"])),
            "gpu_hours_lent": str(gpu_hours(row["lent"])),
            "charge": str(charge),
            "credit": str(credit),
            "net": str(charge - credit),
            "pools": [
                {
                    "pool": name,
                    "gpu_hours_borrowed": str(gpu_hours(b)),
                    "gpu_hours_lent": str(gpu_hours(lent)),
                }
                for name, (b, lent) in sorted(pools[team_id].items())
            ],
        }
    return out


def ledger_hours(*, team_ids: list[int] | None, start: datetime, end: datetime):
    """The hourly rows behind a period, for the ledger page's detail and the API."""
    rows = LedgerHour.objects.filter(hour__gte=start, hour__lt=end).select_related("team", "pool")
    if team_ids is not None:
        rows = rows.filter(team_id__in=team_ids)
    return rows.order_by("-hour", "team__name", "pool__name")


def user_ledger(*, user, month: date) -> dict:
    """The month's ledger lines the user may see: from the closed month's frozen report when
    the month is closed (what finance billed), else live."""
    from billing.selectors.reports import _closed, billing_sees_all, billing_team_list

    teams = {t.pk: t for t in billing_team_list(user=user)}
    closed = _closed(month)
    if closed is not None:
        slugs = {t.slug for t in teams.values()}
        rows = [
            {"team": r["team"], "team_name": r["team_name"], **r["ledger"]}
            for r in closed.snapshot.get("teams", [])
            if r.get("ledger") and (r["team"] in slugs)
        ]
        currency = closed.snapshot.get("currency", "")
    else:
        team_ids = None if billing_sees_all(user=user) else list(teams)
        lines = ledger_month(month=month, team_ids=team_ids)
        rows = [
            {"team": teams[pk].slug, "team_name": teams[pk].name, **line}
            for pk, line in lines.items()
            if pk in teams
        ]
        rate = current_rate()
        currency = rate.currency if rate else ""
    rows.sort(key=lambda r: r["team_name"])
    return {"month": f"{month:%Y-%m}", "closed": closed is not None, "currency": currency,
            "teams": rows}  # fmt: skip
