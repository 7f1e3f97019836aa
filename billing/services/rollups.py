"""Daily rollups: UsageDay rows rebuilt from UsageHour for the days whose hours changed."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from django.db import transaction
from django.utils import timezone

from billing.models import UsageDay, UsageDayState, UsageHour
from billing.periods import midnight
from billing.selectors.usage import hour_sums

DAY_KEYS = ("team_id", "job_id", "gpu_model_id", "mig_profile", "pool_id", "model_name")


def usage_days_mark_dirty(*, cluster_id: int, hours) -> None:
    """Note that these hours' days changed, so their UsageDay rows get rebuilt."""
    days = {h.astimezone(UTC).date() for h in hours}
    if not days:
        return
    UsageDayState.objects.bulk_create(
        [UsageDayState(cluster_id=cluster_id, day=day, dirty=True) for day in sorted(days)],
        update_conflicts=True,
        unique_fields=["cluster", "day"],
        update_fields=["dirty"],
    )


def usage_day_refresh(*, cluster_id: int, day: date) -> int:
    """Rebuild one day's UsageDay rows from its UsageHour rows and mark the day clean."""
    start = midnight(day)
    with transaction.atomic():
        # Writers mark the day dirty through this row, so they wait for the rebuild to commit
        # and a change made meanwhile leaves the day dirty again.
        state, _ = UsageDayState.objects.select_for_update().get_or_create(
            cluster_id=cluster_id, day=day
        )
        UsageDay.objects.filter(cluster_id=cluster_id, day=day).delete()
        groups = (
            UsageHour.objects.filter(
                cluster_id=cluster_id, hour__gte=start, hour__lt=start + timedelta(days=1)
            )
            .values(*DAY_KEYS)
            .annotate(**hour_sums())
            .order_by()
        )
        rows = [UsageDay(day=day, cluster_id=cluster_id, **g) for g in groups]
        UsageDay.objects.bulk_create(rows, batch_size=5000)
        state.dirty = False
        state.refreshed_at = timezone.now()
        state.save(update_fields=["dirty", "refreshed_at"])
    return len(rows)


def usage_days_refresh_dirty(*, now: datetime | None = None, limit: int = 62) -> int:
    """Rebuild the summaries of changed past days (today stays hourly until it ends)."""
    today = (now or timezone.now()).astimezone(UTC).date()
    done = 0
    for cluster_id, day in UsageDayState.objects.filter(dirty=True, day__lt=today).values_list(
        "cluster_id", "day"
    )[:limit]:
        usage_day_refresh(cluster_id=cluster_id, day=day)
        done += 1
    return done
