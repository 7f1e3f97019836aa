"""Energy sums from UsageHour rows (billing.energy turns them into figures), and the energy
settings as the pages show them.

Read from the hourly rows (not the daily rollups) because the carbon intensity may differ per
hour: one aggregate joins each row's hour to the uploaded series, else the site's constant.
"""

from __future__ import annotations

from datetime import datetime

from django.db.models import (
    Count,
    F,
    FloatField,
    OuterRef,
    Q,
    Subquery,
    Sum,
    Value,
)
from django.db.models.functions import Coalesce

from billing.energy import EnergySums
from billing.models import CarbonIntensityHour, EnergySettings, UsageHour


def energy_sums(
    *,
    group_by: list[str],
    start: datetime | None = None,
    end: datetime | None = None,
    team_ids: list[int] | None = None,
    job_id: int | None = None,
    settings: EnergySettings | None = None,
) -> dict[tuple, EnergySums]:
    """Energy sums of held GPU-hours (rows with a pod) per `group_by` key, in [start, end)."""
    settings = settings or EnergySettings.current()
    qs = UsageHour.objects.exclude(pod="")
    if start is not None:
        qs = qs.filter(hour__gte=start)
    if end is not None:
        qs = qs.filter(hour__lt=end)
    if team_ids is not None:
        qs = qs.filter(team_id__in=team_ids)
    if job_id is not None:
        qs = qs.filter(job_id=job_id)
    series = Subquery(
        CarbonIntensityHour.objects.filter(hour=OuterRef("hour")).values("grams_per_kwh")[:1],
        output_field=FloatField(),
    )
    if settings.grams_per_kwh is not None:
        rate = Coalesce(series, Value(float(settings.grams_per_kwh)), output_field=FloatField())
    else:
        rate = series
    sums = {
        "joules": Sum("energy_joules"),
        "measured": Count("id", filter=Q(energy_joules__isnull=False)),
        "weighted": Sum(F("energy_joules") * F("rate"), output_field=FloatField()),
        "without": Sum("energy_joules", filter=Q(rate__isnull=True)),
        "not_measured": Sum("seconds_allocated", filter=Q(energy_joules__isnull=True)),
    }
    qs = qs.annotate(rate=rate)
    if group_by:
        rows = list(qs.values(*group_by).annotate(**sums).order_by())
    else:  # one total
        rows = [qs.aggregate(**sums)]
    return {
        tuple(row[k] for k in group_by): EnergySums(
            joules=row["joules"] or 0.0,
            measured_rows=row["measured"],
            weighted=row["weighted"] or 0.0,
            joules_without_intensity=row["without"] or 0.0,
            seconds_not_measured=row["not_measured"] or 0,
        )
        for row in rows
    }


def carbon_series_summary() -> dict:
    """How much of the carbon intensity series is uploaded: hours, first, last, latest upload."""
    qs = CarbonIntensityHour.objects.all()
    first = qs.order_by("hour").first()
    last = qs.order_by("-hour").first()
    latest = qs.order_by("-uploaded_at").select_related("uploaded_by").first()
    return {
        "hours": qs.count(),
        "first": first.hour if first else None,
        "last": last.hour if last else None,
        "uploaded_at": latest.uploaded_at if latest else None,
        "uploaded_by": str(latest.uploaded_by) if latest and latest.uploaded_by else "",
    }
