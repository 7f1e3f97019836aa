"""GPU-hours lost to preemption, per team and month: the work a preempted job had done since its
last checkpoint (or since its run began, without one), as queues recorded it when the job was
preempted (queues.models.JobPreemption)."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal

from queues.models import JobPreemption

FOUR = Decimal("0.0001")


def preemption_losses(*, start: datetime, end: datetime, team_ids=None) -> dict[int, dict]:
    """team id -> {gpu_hours_lost, preemptions, jobs} for the preemptions in [start, end)."""
    rows = JobPreemption.objects.filter(at__gte=start, at__lt=end)
    if team_ids is not None:
        rows = rows.filter(team_id__in=team_ids)
    sums: dict[int, list] = defaultdict(lambda: [0, 0, set()])
    for team_id, job_id, seconds in rows.values_list("team_id", "job_id", "lost_gpu_seconds"):
        entry = sums[team_id]
        entry[0] += seconds
        entry[1] += 1
        entry[2].add(job_id)
    return {
        team_id: {
            "gpu_hours_lost": str((Decimal(seconds) / 3600).quantize(FOUR, ROUND_HALF_UP)),
            "preemptions": count,
            "jobs": len(jobs),
        }
        for team_id, (seconds, count, jobs) in sums.items()
    }
