"""The budgets page: budgets of the teams the user sees; finance and admins set one."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.shortcuts import redirect, render

from billing.forms.budgets import BudgetForm
from billing.permissions import can_manage_billing
from billing.selectors.budgets import budget_list
from billing.selectors.reports import billing_team_list
from billing.services.budgets import budget_set
from core.forms import add_service_errors


@login_required
def budget_list_page(request):
    can_edit = can_manage_billing(request.user)
    form = BudgetForm(request.POST or None, teams=billing_team_list(user=request.user))
    if request.method == "POST":
        if not can_edit:
            raise PermissionDenied("Only finance and platform admins set budgets.")
        if form.is_valid():
            data = form.cleaned_data
            try:
                budget_set(actor=request.user, **data)
            except ValidationError as exc:
                add_service_errors(form, exc)
            else:
                messages.success(request, f"Budget for {data['team']} saved.")
                return redirect("billing-budgets")
    return render(
        request,
        "billing/budgets.html",
        {"budgets": budget_list(user=request.user), "form": form, "can_edit": can_edit},
        status=400 if form.errors else 200,
    )
