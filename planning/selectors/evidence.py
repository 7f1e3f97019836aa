"""Evidence for quota decisions: what each team did with its quota in each pool over the last
days, measured, and the recommendations that follow.

Per team and pool, over the lookback (hours up to the current one):
- use: the GPUs it held each hour (GPU-seconds held / 3600, from the DCGM usage; an hour with
  no row held none), its p50, p90 and peak;
- borrowing: the share of hours it borrowed from its cohort and the p90 of what it borrowed
  (from the borrowing ledger);
- idle share: of the GPU-hours it held, those in hours its GPUs stayed below its jobs' tier's
  idle threshold (as the idle report counts them).

Recommendations: quota unused at p90 (p90 below RELEASE_BELOW of nominal: release down to the
p90), chronic borrowing (borrowing in at least CHRONIC_SHARE of hours: raise by its p90), and a
high idle share (at least IDLE_SHARE: settle that before any increase).
"""

from __future__ import annotations

import math
from collections import defaultdict
from datetime import datetime, timedelta

from django.db.models import F, Sum
from django.utils import timezone

from billing.dcgm import HOUR, hour_start
from billing.models import LedgerHour, UsageHour
from billing.pricing import percentile
from fleet.models import NodePool
from queues.models import Quota

RELEASE_BELOW = 0.7
CHRONIC_SHARE = 0.25
IDLE_SHARE = 0.3


def _series(values: dict, hours: int) -> list[float]:
    """Hourly values with the hours that have none as zeros."""
    return list(values.values()) + [0.0] * max(0, hours - len(values))


def quota_evidence(*, teams, days: int = 30, now: datetime | None = None, pool=None) -> list[dict]:
    """Per (team, pool) with a quota or use in the lookback: the figures and recommendations."""
    now = now or timezone.now()
    end = hour_start(now) + HOUR
    start = end - timedelta(days=days)
    hours = days * 24
    team_ids = [t.pk for t in teams]
    usage = UsageHour.objects.filter(
        hour__gte=start, hour__lt=end, team_id__in=team_ids, pool__isnull=False
    )
    ledger = LedgerHour.objects.filter(hour__gte=start, hour__lt=end, team_id__in=team_ids)
    quotas = Quota.objects.filter(team_id__in=team_ids).select_related("team", "pool")
    if pool is not None:
        usage, ledger, quotas = (
            usage.filter(pool=pool),
            ledger.filter(pool=pool),
            quotas.filter(pool=pool),
        )
    held: dict[tuple, dict] = defaultdict(dict)
    for row in usage.values("team_id", "pool_id", "hour").annotate(s=Sum("seconds_allocated")):
        held[(row["team_id"], row["pool_id"])][row["hour"]] = row["s"] / 3600
    idle: dict[tuple, int] = defaultdict(int)
    total: dict[tuple, int] = defaultdict(int)
    for row in (
        usage.filter(job__isnull=False, util_mean__lt=F("job__tier__idle_threshold_percent"))
        .values("team_id", "pool_id")
        .annotate(s=Sum("seconds_allocated"))
    ):
        idle[(row["team_id"], row["pool_id"])] = row["s"]
    for row in usage.values("team_id", "pool_id").annotate(s=Sum("seconds_allocated")):
        total[(row["team_id"], row["pool_id"])] = row["s"]
    borrowed: dict[tuple, dict] = defaultdict(dict)
    for row in ledger.values("team_id", "pool_id", "hour").annotate(s=Sum("borrowed_seconds")):
        if row["s"]:
            borrowed[(row["team_id"], row["pool_id"])][row["hour"]] = row["s"] / 3600
    by_key = {(q.team_id, q.pool_id): q for q in quotas}
    teams_by_id = {t.pk: t for t in teams}
    pools = NodePool.objects.in_bulk({k[1] for k in (set(by_key) | set(held))})
    out = []
    for key in sorted(set(by_key) | set(held), key=lambda k: (teams_by_id[k[0]].name, k[1])):
        quota = by_key.get(key)
        nominal = quota.nominal_gpus if quota else 0
        use = _series(held.get(key, {}), hours)
        borrow_series = _series(borrowed.get(key, {}), hours)
        p50, p90 = percentile(use, 0.5) or 0.0, percentile(use, 0.9) or 0.0
        share_borrowing = len(borrowed.get(key, {})) / hours
        p90_borrowed = percentile(borrow_series, 0.9) or 0.0
        idle_share = idle[key] / total[key] if total[key] else 0.0
        figures = {
            "nominal_gpus": nominal,
            "use_p50": round(p50, 2),
            "use_p90": round(p90, 2),
            "use_peak": round(max(use), 2) if use else 0.0,
            "usage_percent_p90": round(100 * p90 / nominal, 1) if nominal else None,
            "hours_with_data": len(held.get(key, {})),
            "borrowing_hours_share": round(share_borrowing, 3),
            "borrowed_p90": round(p90_borrowed, 2),
            "idle_share": round(idle_share, 3),
        }
        recs = []
        if nominal and figures["hours_with_data"] and p90 < RELEASE_BELOW * nominal:
            target = math.ceil(p90)
            recs.append({
                "kind": "release",
                "suggested_nominal_gpus": target,
                "text": f"At p90 it held {p90:.1f} of its {nominal} GPUs over {days} days: "
                f"{nominal - target} could go back to the pool (quota {target}).",
            })  # fmt: skip
        if share_borrowing >= CHRONIC_SHARE:
            raise_by = max(1, math.ceil(p90_borrowed))
            recs.append({
                "kind": "raise",
                "suggested_nominal_gpus": nominal + raise_by,
                "text": f"It borrowed in {share_borrowing:.0%} of the hours (p90 "
                f"{p90_borrowed:.1f} GPUs): a quota of {nominal + raise_by} would cover it.",
            })  # fmt: skip
        if idle_share >= IDLE_SHARE:
            recs.append({
                "kind": "idle",
                "suggested_nominal_gpus": None,
                "text": f"{idle_share:.0%} of the GPU-hours it held were idle: settle that "
                "before granting more.",
            })  # fmt: skip
        out.append({
            "team": teams_by_id[key[0]],
            "pool": pools.get(key[1]),
            "figures": figures,
            "recommendations": recs,
        })  # fmt: skip
    return out
