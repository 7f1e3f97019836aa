"""The idle-GPU page: a month's idle GPU-hours and their cost per team and per user, and the jobs
holding idle GPUs now."""

from datetime import timedelta

from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import render
from django.utils import timezone

from billing.periods import month_start, next_month, parse_month
from billing.selectors.idle import idle_report
from billing.selectors.reports import billing_team_ids


@login_required
def idle_page(request):
    month = parse_month(request.GET.get("month") or f"{timezone.now():%Y-%m}")
    if month is None:
        raise Http404("No such month.")
    report = idle_report(month=month, team_ids=billing_team_ids(user=request.user))
    return render(
        request,
        "billing/idle.html",
        {
            "month": month,
            "report": report,
            "prev_month": month_start(month - timedelta(days=1)),
            "next_month": next_month(month),
        },
    )
