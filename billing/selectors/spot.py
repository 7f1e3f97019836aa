"""Spot capacity in the bill: what a team's spot GPU-hours cost, what they would have cost on
demand (the price book's price of the same model and profile without "spot", at the same hours,
on the team's billing basis), and the GPU-hours lost to interruptions: the time workers of jobs
that keep no checkpoint had run when their node was taken back, which the job ran again."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from decimal import Decimal

from billing.models import UsageHour
from billing.pricing import billable_seconds, cents, cost_of, gpu_hours
from billing.services.usage import SPOT
from queues.models import JobPod


def spot_figures(*, start: datetime, end: datetime, team_ids, book, policies) -> dict[int, dict]:
    """Per team id with spot usage or lost work in [start, end)."""
    rows = UsageHour.objects.filter(
        hour__gte=start, hour__lt=end, mig_profile__startswith=SPOT, team_id__isnull=False
    )
    lost_pods = JobPod.objects.filter(
        interrupted=True, job__checkpoint_volume="", started_at__isnull=False,
        finished_at__gte=start, finished_at__lt=end,
    )  # fmt: skip
    if team_ids is not None:
        rows = rows.filter(team_id__in=team_ids)
        lost_pods = lost_pods.filter(job__team_id__in=team_ids)
    sums: dict[int, list] = defaultdict(lambda: [0, Decimal(0), Decimal(0), 0])
    for team_id, hour, model_id, profile, allocated, busy in rows.values_list(
        "team_id", "hour", "gpu_model_id", "mig_profile", "seconds_allocated", "seconds_busy"
    ):
        basis, weight = policies.get(team_id, ("allocated", Decimal("0.5")))
        seconds = billable_seconds(allocated=allocated, used=busy, basis=basis,
                                   blend_weight=weight)  # fmt: skip
        entry = sums[team_id]
        entry[0] += allocated
        spot = book.at(model_id, profile, hour)
        on_demand = book.at(model_id, profile.removeprefix(SPOT).strip(), hour)
        if spot is not None:
            entry[1] += cost_of(seconds, spot.price_per_hour)
        if on_demand is not None:
            entry[2] += cost_of(seconds, on_demand.price_per_hour)
    for team_id, gpus, started, finished in lost_pods.values_list(
        "job__team_id", "gpus", "started_at", "finished_at"
    ):
        sums[team_id][3] += gpus * max(0, int((finished - started).total_seconds()))
    return {
        team_id: {
            "gpu_hours": str(gpu_hours(allocated)),
            "cost": f"{cents(cost):.2f}",
            "on_demand_cost": f"{cents(on_demand):.2f}",
            "saved": f"{cents(on_demand) - cents(cost):.2f}",
            "gpu_hours_lost_to_restarts": str(gpu_hours(lost)),
        }
        for team_id, (allocated, cost, on_demand, lost) in sums.items()
    }
