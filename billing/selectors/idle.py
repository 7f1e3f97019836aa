"""Idle GPU-hours: the hours a job's GPUs were held below its tier's idle threshold (the hour's
mean utilisation), and what they cost at the price book's price; per team and per user. The
jobs idle right now come from the live flags billing.services.idle keeps."""

from __future__ import annotations

from collections import defaultdict
from datetime import date
from decimal import Decimal

from django.contrib.auth import get_user_model
from django.db.models import F, Sum

from billing.models import UsageHour
from billing.periods import month_bounds
from billing.pricing import cents, cost_of, gpu_hours
from billing.selectors.prices import price_book_for
from queues.models import Job, Team


def idle_report(*, month: date, team_ids: list[int] | None = None) -> dict:
    """Idle GPU-hours and their cost in a month per team and per user (of the given teams, or
    all), plus the jobs of those teams holding idle GPUs now."""
    start, end = month_bounds(month)
    rows = UsageHour.objects.filter(
        hour__gte=start, hour__lt=end, job__isnull=False, seconds_allocated__gt=0,
        util_mean__lt=F("job__tier__idle_threshold_percent"),
    )  # fmt: skip
    if team_ids is not None:
        rows = rows.filter(team_id__in=team_ids)
    book = price_book_for(start=start, end=end)
    grouped = rows.values("team_id", "job__owner_id", "gpu_model_id", "mig_profile", "hour")
    by_team: dict[int, list] = defaultdict(lambda: [0, Decimal(0), set()])
    by_user: dict[tuple, list] = defaultdict(lambda: [0, Decimal(0), set()])
    for g in grouped.annotate(s=Sum("seconds_allocated")).values(
        "team_id", "job__owner_id", "gpu_model_id", "mig_profile", "hour", "s"
    ):
        price = book.at(g["gpu_model_id"], g["mig_profile"], g["hour"])
        cost = cost_of(g["s"], price.price_per_hour) if price else Decimal(0)
        for acc in (by_team[g["team_id"]], by_user[(g["team_id"], g["job__owner_id"])]):
            acc[0] += g["s"]
            acc[1] += cost
    jobs_per = rows.values_list("team_id", "job__owner_id", "job_id").distinct()
    for team_id, owner_id, job_id in jobs_per:
        by_team[team_id][2].add(job_id)
        by_user[(team_id, owner_id)][2].add(job_id)
    teams = Team.objects.in_bulk({k for k in by_team if k is not None})
    users = get_user_model().objects.in_bulk({u for _, u in by_user})

    def line(acc) -> dict:
        return {"gpu_hours_idle": str(gpu_hours(acc[0])), "cost": str(cents(acc[1])),
                "jobs": len(acc[2])}  # fmt: skip

    team_rows = [
        {"team": teams[t].slug, "team_name": teams[t].name, **line(acc)}
        for t, acc in by_team.items()
        if t in teams
    ]
    user_rows = [
        {"team": teams[t].slug, "user": users[u].get_username(), **line(acc)}
        for (t, u), acc in by_user.items()
        if t in teams and u in users
    ]
    team_rows.sort(key=lambda r: (-Decimal(r["gpu_hours_idle"]), r["team"]))
    user_rows.sort(key=lambda r: (-Decimal(r["gpu_hours_idle"]), r["team"], r["user"]))
    now = Job.objects.filter(state=Job.State.RUNNING, idle_since__isnull=False)
    suspended = Job.objects.filter(idle_suspended_at__isnull=False).exclude(
        state__in=Job.FINAL_STATES
    )
    if team_ids is not None:
        now, suspended = now.filter(team_id__in=team_ids), suspended.filter(team_id__in=team_ids)
    live = [
        {
            "job_id": j.pk,
            "name": j.name,
            "team": j.team.slug,
            "owner": j.owner.get_username(),
            "idle_since": j.idle_since,
            "util": j.idle_util,
            "warned_at": j.idle_warned_at,
            "suspended_at": j.idle_suspended_at,
        }  # fmt: skip
        for j in (now | suspended).select_related("team", "owner").order_by("idle_since", "pk")
    ]
    return {
        "month": f"{month:%Y-%m}",
        "teams": team_rows,
        "users": user_rows,
        "idle_now": live,
        "totals": {
            "gpu_hours_idle": str(gpu_hours(sum(a[0] for a in by_team.values()))),
            "cost": str(sum((Decimal(r["cost"]) for r in team_rows), Decimal(0))),
        },
    }
