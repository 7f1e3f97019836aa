"""The jobs' state for /metrics (core.metrics reads it at scrape time): how many jobs each team
has in each state."""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import Count

from core.metrics import gauge
from queues.models import Job


def job_state() -> Iterable:
    jobs = gauge("quartermaster_jobs", "Jobs by state and team.", ["state", "team"])
    counts = Job.objects.values_list("state", "team__slug").annotate(n=Count("pk")).order_by()
    for state, team, n in counts:
        jobs.add_metric([state, team], n)
    return [jobs]
