"""The quota recommendations page: evidence per team and pool, and the auto-approval rule."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.shortcuts import redirect, render

from core.forms import add_service_errors
from core.roles import is_manager, is_platform_admin
from planning.forms import AutoApprovalForm
from planning.selectors.evidence import quota_evidence
from planning.services.auto_approval import (
    RULE_FIELDS,
    auto_approval_rule,
    quota_auto_approval_set,
)
from queues.selectors.tenancy import team_list


@login_required
def recommendations(request):
    """Evidence per team and pool (use, borrowing, idle share) with what it recommends, for
    managers (their departments) and platform admins (all, and they set the auto-approval
    rule)."""
    admin = is_platform_admin(request.user)
    if not (is_manager(request.user) or admin):
        raise PermissionDenied("Quota recommendations are for managers and platform admins.")
    rule = auto_approval_rule()
    form = AutoApprovalForm(
        request.POST or None, initial={f: getattr(rule, f) for f in RULE_FIELDS}
    )
    if request.method == "POST":
        if not admin:
            raise PermissionDenied("Only platform admins set the quota auto-approval rule.")
        if form.is_valid():
            try:
                quota_auto_approval_set(actor=request.user, **form.cleaned_data)
            except ValidationError as exc:
                add_service_errors(form, exc)
            else:
                messages.success(request, "Auto-approval rule saved.")
                return redirect("quota-recommendations")
    teams = list(team_list(user=request.user))
    return render(
        request,
        "planning/recommendations.html",
        {
            "rows": quota_evidence(teams=teams, days=rule.lookback_days),
            "rule": rule,
            "form": form,
            "can_edit": admin,
        },
        status=400 if form.errors else 200,
    )
