"""Billing pages: monthly reports with charts and exports, team spend, price book, budgets."""

from datetime import timedelta

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import Http404, HttpResponse, HttpResponseForbidden
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from billing import reports, selectors, services
from billing.charts import report_charts
from billing.forms import BudgetForm, GpuPriceForm
from billing.models import MonthlyReport
from billing.permissions import can_manage_billing
from billing.serializers import parse_month
from queues.models import Team
from queues.roles import is_platform_admin


def _month_or_404(text):
    month = parse_month(text)
    if month is None:
        raise Http404("No such month.")
    return month


def _scoped(request, month):
    return reports.scoped_report(
        month=month,
        teams=list(selectors.billing_team_list(user=request.user)),
        everything=selectors.billing_sees_all(user=request.user),
    )


@login_required
def billing_home(request):
    return redirect("billing-report", month=f"{timezone.now():%Y-%m}")


@login_required
def report_detail(request, month):
    parsed = _month_or_404(month)
    report = _scoped(request, parsed)
    finance = selectors.billing_sees_all(user=request.user)
    state = MonthlyReport.objects.filter(month=parsed).first()
    prev_month = services.month_start(parsed - timedelta(days=1))
    return render(
        request,
        "billing/report.html",
        {
            "report": report,
            "month": parsed,
            "state": state,
            "charts": report_charts(report),
            "finance": finance,
            "can_close": can_manage_billing(request.user),
            "can_reopen": is_platform_admin(request.user),
            "prev_month": prev_month,
            "next_month": services.next_month(parsed),
            "month_ended": services.next_month(parsed) <= timezone.now().date(),
            "ingestion_problems": selectors.ingestion_problems() if finance else [],
        },
    )


@login_required
def report_export(request, month, fmt):
    parsed = _month_or_404(month)
    if fmt not in reports.EXPORTS:
        raise Http404("No such export.")
    content_type, render_fn, _ = reports.EXPORTS[fmt]
    response = HttpResponse(render_fn(_scoped(request, parsed)), content_type=content_type)
    filename = reports.export_filename(month=month, fmt=fmt)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@login_required
@require_POST
def report_action(request, month, action):
    parsed = _month_or_404(month)
    if action not in ("close", "reopen"):
        raise Http404("No such action.")
    try:
        if action == "close":
            services.report_close(actor=request.user, month=parsed)
            messages.success(request, f"{parsed:%B %Y} is closed; its figures are frozen.")
        else:
            services.report_reopen(
                actor=request.user, month=parsed, reason=request.POST.get("reason", "")
            )
            messages.warning(request, f"{parsed:%B %Y} is open again.")
    except PermissionError as exc:
        return HttpResponseForbidden(str(exc))
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    return redirect("billing-report", month=month)


@login_required
def team_billing(request, slug):
    try:
        team = selectors.billing_team_list(user=request.user).get(slug=slug)
    except Team.DoesNotExist as exc:
        raise Http404("No such team.") from exc
    month = services.month_start(timezone.now())
    report = reports.team_report(team=team, month=month)
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


@login_required
def price_list(request):
    can_edit = can_manage_billing(request.user)
    form = GpuPriceForm(request.POST or None)
    if request.method == "POST":
        if not can_edit:
            return HttpResponseForbidden("Only finance and platform admins edit prices.")
        if form.is_valid():
            try:
                services.gpu_price_create(actor=request.user, **form.cleaned_data)
            except ValidationError as exc:
                for field, errors in exc.message_dict.items():
                    form.add_error(field if field in form.fields else None, errors)
            else:
                messages.success(request, "Price added.")
                return redirect("billing-prices")
    return render(
        request,
        "billing/prices.html",
        {"prices": selectors.price_list(user=request.user), "form": form, "can_edit": can_edit},
        status=400 if form.errors else 200,
    )


@login_required
def budget_list(request):
    can_edit = can_manage_billing(request.user)
    teams = selectors.billing_team_list(user=request.user)
    form = BudgetForm(request.POST or None, teams=teams)
    if request.method == "POST":
        if not can_edit:
            return HttpResponseForbidden("Only finance and platform admins set budgets.")
        if form.is_valid():
            data = form.cleaned_data
            try:
                services.budget_set(actor=request.user, **data)
            except ValidationError as exc:
                for field, errors in exc.message_dict.items():
                    form.add_error(field if field in form.fields else None, errors)
            else:
                messages.success(request, f"Budget for {data['team']} saved.")
                return redirect("billing-budgets")
    return render(
        request,
        "billing/budgets.html",
        {"budgets": selectors.budget_list(user=request.user), "form": form, "can_edit": can_edit},
        status=400 if form.errors else 200,
    )
