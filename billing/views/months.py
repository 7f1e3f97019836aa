"""Month close from the report page: close a month (finance, admins) or reopen it (admins)."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import Http404
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from billing.services.months import report_close, report_reopen
from billing.views.reports import month_or_404


@login_required
@require_POST
def report_action(request, month, action):
    parsed = month_or_404(month)
    if action not in ("close", "reopen"):
        raise Http404("No such action.")
    try:
        if action == "close":
            report_close(actor=request.user, month=parsed)
            messages.success(request, f"{parsed:%B %Y} is closed; its figures are frozen.")
        else:
            report_reopen(actor=request.user, month=parsed, reason=request.POST.get("reason", ""))
            messages.warning(request, f"{parsed:%B %Y} is open again.")
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    return redirect("billing-report", month=month)
