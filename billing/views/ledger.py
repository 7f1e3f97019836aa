"""The borrowing and lending ledger page: a month per team, the hours behind it, the rate."""

from datetime import timedelta

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.http import Http404
from django.shortcuts import redirect, render
from django.utils import timezone

from billing.forms.ledger import LedgerRateForm
from billing.periods import month_bounds, month_start, next_month, parse_month
from billing.permissions import can_manage_billing
from billing.selectors.ledger import current_rate, ledger_hours, rate_history, user_ledger
from billing.selectors.reports import billing_team_ids
from billing.services.ledger import ledger_rate_set
from core.forms import add_service_errors


@login_required
def ledger_page(request):
    raw = request.GET.get("month") or f"{timezone.now():%Y-%m}"
    month = parse_month(raw)
    if month is None:
        raise Http404("No such month.")
    can_edit = can_manage_billing(request.user)
    form = LedgerRateForm(request.POST or None)
    if request.method == "POST":
        if not can_edit:
            raise PermissionDenied("Only finance and platform admins set the borrowing rate.")
        if form.is_valid():
            try:
                rate = ledger_rate_set(actor=request.user, **form.cleaned_data)
            except ValidationError as exc:
                add_service_errors(form, exc)
            else:
                messages.success(
                    request,
                    f"Borrowing rate set to {rate.rate_per_gpu_hour} {rate.currency} per "
                    f"GPU-hour from now on.",
                )
                return redirect(f"{request.path}?month={month:%Y-%m}")
    team_ids = billing_team_ids(user=request.user)
    ledger = user_ledger(user=request.user, month=month)
    start, end = month_bounds(month)
    hours = Paginator(ledger_hours(team_ids=team_ids, start=start, end=end), 50).get_page(
        request.GET.get("page")
    )
    return render(
        request,
        "billing/ledger.html",
        {
            "month": month,
            "ledger": ledger,
            "hours": hours,
            "rate": current_rate(),
            "rates": rate_history() if can_edit else [],
            "form": form,
            "can_edit": can_edit,
            "prev_month": month_start(month - timedelta(days=1)),
            "next_month": next_month(month),
        },
        status=400 if form.errors else 200,
    )
