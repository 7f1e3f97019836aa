"""The measured-use panel of a job's page (loaded by htmx from the job page)."""

from datetime import timedelta

from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import render
from django.utils import timezone

from billing.selectors.gpufaults import gpu_fault_notices
from billing.selectors.jobs import job_usage
from queues.models import Job
from queues.selectors.jobs import job_get

USAGE_SETTLES = timedelta(minutes=2)


@login_required
def job_usage_panel(request, pk):
    try:
        job = job_get(user=request.user, pk=pk)
    except Job.DoesNotExist as exc:
        raise Http404("No such job.") from exc
    usage = job_usage(job=job)
    points = usage["utilisation"]["points"]
    if len(points) == 1:  # one measurement: a level line across the chart
        points = points * 2
    width = max(1, len(points) - 1)
    chart = " ".join(
        f"{i * 300 / width:.1f},{60 - p['util_percent'] * 0.6:.1f}" for i, p in enumerate(points)
    )
    # Samples arrive while the job runs and, from the last scrapes and the hour's rollup,
    # shortly after it ends: the card keeps reloading itself until then.
    live = job.state not in Job.FINAL_STATES or (
        job.finished_at is not None and timezone.now() - job.finished_at < USAGE_SETTLES
    )
    context = {"usage": usage, "chart": chart, "live": live}
    context["gpu_faults"] = gpu_fault_notices(job=job)
    return render(request, "billing/_job_usage.html", context)
