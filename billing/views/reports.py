"""Report pages: a month's report with charts and exports, and one team's spend this month."""

from datetime import timedelta

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone

from billing.charts import report_charts
from billing.exports import EXPORTS, export_filename
from billing.models import MonthlyReport
from billing.periods import month_start, next_month, parse_month
from billing.permissions import can_manage_billing
from billing.selectors.reports import billing_sees_all, billing_team_list, team_report, user_report
from billing.selectors.usage import ingestion_problems
from core.roles import is_platform_admin
from queues.models import Team


def month_or_404(text: str):
    """The month a `YYYY-MM` path segment names; 404 when it names none."""
    month = parse_month(text)
    if month is None:
        raise Http404("No such month.")
    return month


@login_required
def billing_home(request):
    return redirect("billing-report", month=f"{timezone.now():%Y-%m}")


@login_required
def report_detail(request, month):
    parsed = month_or_404(month)
    report = user_report(user=request.user, month=parsed)
    finance = billing_sees_all(user=request.user)
    return render(
        request,
        "billing/report.html",
        {
            "report": report,
            "month": parsed,
            "state": MonthlyReport.objects.filter(month=parsed).first(),
            "charts": report_charts(report),
            "finance": finance,
            "has_ledger": any(t.get("ledger") for t in report.get("teams", [])),
            "has_reservations": any(t.get("reservations") for t in report.get("teams", [])),
            "has_fault_credits": any(t.get("gpu_fault_credits") for t in report.get("teams", [])),
            "has_preemption_losses": any(t.get("preemption") for t in report.get("teams", [])),
            "can_close": can_manage_billing(request.user),
            "can_reopen": is_platform_admin(request.user),
            "prev_month": month_start(parsed - timedelta(days=1)),
            "next_month": next_month(parsed),
            "month_ended": next_month(parsed) <= timezone.now().date(),
            "ingestion_problems": ingestion_problems() if finance else [],
        },
    )


@login_required
def report_export(request, month, fmt):
    parsed = month_or_404(month)
    if fmt not in EXPORTS:
        raise Http404("No such export.")
    content_type, render_fn, _ = EXPORTS[fmt]
    report = user_report(user=request.user, month=parsed)
    response = HttpResponse(render_fn(report), content_type=content_type)
    filename = export_filename(month=month, fmt=fmt)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@login_required
def team_billing(request, slug):
    try:
        team = billing_team_list(user=request.user).get(slug=slug)
    except Team.DoesNotExist as exc:
        raise Http404("No such team.") from exc
    month = month_start(timezone.now())
    report = team_report(team=team, month=month)
    return render(
        request,
        "billing/team.html",
        {
            "team": team,
            "report": report,
            "row": report["teams"][0] if report["teams"] else None,
            "month": month,
            "charts": report_charts(report),
        },
    )
