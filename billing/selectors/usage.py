"""Usage reads: aggregates over UsageHour and UsageDay priced per hour, spend, ingestion state."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from django.db import connection
from django.db.models import Case, Count, F, IntegerField, Q, QuerySet, Sum, Value, When
from django.db.models.functions import Coalesce
from django.utils import timezone

from billing import dcgm
from billing.models import (
    Budget,
    IngestState,
    ScrapeState,
    TeamBillingPolicy,
    UsageDay,
    UsageDayState,
    UsageHour,
)
from billing.periods import ceil_day, midnight, month_bounds
from billing.pricing import PriceBook, billable_seconds, cost_of
from billing.selectors.prices import price_book_for
from fleet.models import Cluster
from queues.models import Team


def _price_id_case(book: PriceBook) -> Case:
    whens = []
    for p in book:
        cond = Q(gpu_model_id=p.gpu_model_id, mig_profile=p.mig_profile, hour__gte=p.effective_from)
        if p.effective_to is not None:
            cond &= Q(hour__lt=p.effective_to)
        whens.append(When(cond, then=Value(p.id)))
    return Case(*whens, default=Value(None), output_field=IntegerField())


def _day_price_case(book: PriceBook) -> Case:
    # Only used for days no price period starts or ends inside, so the day's first hour decides.
    whens = []
    for p in book:
        cond = Q(gpu_model_id=p.gpu_model_id, mig_profile=p.mig_profile)
        cond &= Q(day__gte=ceil_day(p.effective_from))
        if p.effective_to is not None:
            cond &= Q(day__lt=ceil_day(p.effective_to))
        whens.append(When(cond, then=Value(p.id)))
    return Case(*whens, default=Value(None), output_field=IntegerField())


SUM_FIELDS = (
    "allocated", "used", "idle", "util_weighted", "gap_rows", "stuck_rows", "unknown_rows",
    "unknown_seconds",
)  # fmt: skip


def hour_sums() -> dict:
    """The sums of UsageHour rows that a report line needs, as aggregate expressions."""
    return {
        "allocated": Coalesce(Sum("seconds_allocated"), 0),
        "used": Coalesce(Sum("seconds_busy", filter=~Q(pod="")), 0),
        "idle": Coalesce(Sum("seconds_idle"), 0),
        "util_weighted": Coalesce(Sum(F("util_mean") * F("seconds_allocated")), 0.0),
        "gap_rows": Count("id", filter=Q(flag_gap=True)),
        "stuck_rows": Count("id", filter=Q(flag_stuck_zero=True)),
        "unknown_rows": Count("id", filter=Q(flag_unknown_model=True)),
        "unknown_seconds": Coalesce(
            Sum(F("seconds_allocated") + F("seconds_idle"), filter=Q(flag_unknown_model=True)), 0
        ),
    }


def clean_days(*, start: datetime, end: datetime, book: PriceBook) -> set[date]:
    """Past days inside [start, end) whose UsageDay rows are current and need no hourly prices."""
    today = timezone.now().astimezone(UTC).date()
    first, last = ceil_day(start), end.astimezone(UTC).date()  # whole days only
    boundaries = set()
    for p in book:
        for moment in (p.effective_from, p.effective_to):
            if moment is not None and ceil_day(moment) != moment.astimezone(UTC).date():
                boundaries.add(moment.astimezone(UTC).date())
    states: dict[date, bool] = {}
    for day, dirty in UsageDayState.objects.filter(
        day__gte=first, day__lt=min(last, today)
    ).values_list("day", "dirty"):
        states[day] = states.get(day, True) and not dirty
    return {day for day, clean in states.items() if clean and day not in boundaries}


def _ranges_outside(start: datetime, end: datetime, days: set[date]) -> list[tuple]:
    """[start, end) minus the given whole days, as a list of half-open datetime ranges."""
    out = []
    cursor = start
    for day in sorted(days):
        d0 = midnight(day)
        if d0 > cursor:
            out.append((cursor, d0))
        cursor = max(cursor, d0 + timedelta(days=1))
    if cursor < end:
        out.append((cursor, end))
    return out


def usage_aggregate(
    *,
    start: datetime,
    end: datetime,
    group_by: list[str],
    team_ids=None,
    book: PriceBook | None = None,
) -> list[dict]:
    """usage_aggregate_rows as dicts: the group_by fields, price_id and SUM_FIELDS."""
    names = [*group_by, "price_id"]
    return [
        {**dict(zip(names, key, strict=True)), **dict(zip(SUM_FIELDS, sums, strict=True))}
        for key, sums in usage_aggregate_rows(
            start=start, end=end, group_by=group_by, team_ids=team_ids, book=book
        )
    ]


def usage_aggregate_rows(
    *,
    start: datetime,
    end: datetime,
    group_by: list[str],
    team_ids=None,
    book: PriceBook | None = None,
) -> list[tuple[tuple, list]]:
    """Usage sums over [start, end) grouped by `group_by` and by the price in force.

    Clean past days come from UsageDay, the rest (today, changed days, days a price starts or
    ends inside) from UsageHour; each group has a single price, so its cost is exact. The price
    in force is a CASE over the (few) price rows. `group_by` may name team_id, job_id,
    gpu_model_id, mig_profile, pool_id and model_name.
    """
    book = book or price_book_for(start=start, end=end)
    days = clean_days(start=start, end=end, book=book)
    merged: dict[tuple, dict] = {}

    columns = [*group_by, "price_id", *SUM_FIELDS]
    width = len(group_by) + 1
    casts = [int, int, int, float, int, int, int, int]  # SUM_FIELDS, in order

    def merge(qs):
        # Plain cursor rows: a month is ~100k groups, and the ORM's per-row converters and
        # dicts would cost more than the query. The SQL is the queryset's own.
        sql, params = qs.values_list(*columns).query.sql_with_params()
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            rows = cursor.fetchall()
        for row in rows:
            key = row[:width]
            sums = [cast(v or 0) for cast, v in zip(casts, row[width:], strict=True)]
            entry = merged.get(key)
            if entry is None:
                merged[key] = sums
            else:
                for i, v in enumerate(sums):
                    entry[i] += v

    ranges = _ranges_outside(start, end, days)
    if ranges:
        window = Q()
        for r0, r1 in ranges:
            window |= Q(hour__gte=r0, hour__lt=r1)
        hourly = UsageHour.objects.filter(window)
        if team_ids is not None:
            hourly = hourly.filter(team_id__in=team_ids)
        merge(
            hourly.annotate(price_id=_price_id_case(book))
            .values(*group_by, "price_id")
            .annotate(**hour_sums())
            .order_by()
        )
    if days:
        daily = UsageDay.objects.filter(day__in=days)
        if team_ids is not None:
            daily = daily.filter(team_id__in=team_ids)
        merge(
            daily.annotate(price_id=_day_price_case(book))
            .values(*group_by, "price_id")
            .annotate(
                **{
                    name: Coalesce(Sum(name), 0.0 if name == "util_weighted" else 0)
                    for name in SUM_FIELDS
                }
            )
            .order_by()
        )
    return list(merged.items())


def policies_by_team(team_ids=None) -> dict[int, tuple[str, Decimal]]:
    """Billing basis and blend weight per team id, for teams that have a policy."""
    qs = TeamBillingPolicy.objects.all()
    if team_ids is not None:
        qs = qs.filter(team_id__in=team_ids)
    return {p.team_id: (p.basis, p.blend_weight) for p in qs}


def group_cost(group: dict, book: PriceBook, policy: tuple[str, Decimal] | None) -> Decimal:
    """Cost of one aggregate group under the team's basis (allocated when no policy)."""
    price = book.by_id.get(group["price_id"]) if group["price_id"] is not None else None
    if price is None:
        return Decimal(0)
    basis, weight = policy or ("allocated", Decimal("0.5"))
    seconds = billable_seconds(
        allocated=group["allocated"], used=group["used"], basis=basis, blend_weight=weight
    )
    return cost_of(seconds, price.price_per_hour)


def team_spend(*, team: Team, month: date, kind: str = Budget.Kind.CURRENCY) -> Decimal:
    """What the team has spent in the month so far (currency, or allocated GPU-hours).

    Money is the team's total on the month's report, to the cent (its lines rounded once and
    added up), so a budget's "spent" and the report never differ."""
    start, end = month_bounds(month)
    if kind == Budget.Kind.GPU_HOURS:
        seconds = UsageHour.objects.filter(team=team, hour__gte=start, hour__lt=end).aggregate(
            s=Coalesce(Sum("seconds_allocated"), 0)
        )["s"]
        return Decimal(seconds) / Decimal(3600)
    from billing.selectors.reports import team_report

    rows = team_report(team=team, month=month)["teams"]
    return Decimal(rows[0]["cost"]) if rows else Decimal(0)


def ingestion_problems(*, since_hours: int = 24) -> list[str]:
    """Recent scrape or Prometheus failures, for finance and admins to see on the reports."""
    since = timezone.now() - timedelta(hours=since_hours)
    problems = [
        f"Scrape of {s.url} failed at {s.last_error_at:%Y-%m-%d %H:%M} UTC: {s.last_error}"
        for s in ScrapeState.objects.exclude(last_error="").filter(last_error_at__gte=since)
    ]
    failed = IngestState.objects.filter(state=IngestState.State.FAILED).order_by("-hour")
    problems += [
        f"Hour {i.hour:%Y-%m-%d %H:00} UTC not ingested from Prometheus yet: {i.error}"
        for i in failed[:5]
    ]
    return problems


def hours_missing(*, cluster: Cluster, now: datetime | None = None, days: int = 3) -> list:
    """Closed hours of the last `days` days not yet ingested successfully, oldest first."""
    now = now or timezone.now()
    last_closed = dcgm.hour_start(now) - dcgm.HOUR
    first = last_closed - timedelta(days=days) + dcgm.HOUR
    done = set(
        IngestState.objects.filter(
            cluster=cluster, hour__gte=first, state=IngestState.State.DONE
        ).values_list("hour", flat=True)
    )
    hours = []
    h = first
    while h <= last_closed:
        if h not in done:
            hours.append(h)
        h += dcgm.HOUR
    return hours


def metered_clusters() -> QuerySet[Cluster]:
    """The clusters billing reads metrics of: every registered one (a disabled cluster's GPUs
    still run what they ran), the default first."""
    return Cluster.objects.filter(deleted_at__isnull=True).order_by("-is_default", "name")


def default_cluster() -> Cluster | None:
    """The cluster billing takes as default (the settings' exporters and Prometheus are its):
    the one marked default, else the first registered."""
    return Cluster.objects.filter(deleted_at__isnull=True).order_by("-is_default", "pk").first()
