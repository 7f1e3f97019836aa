"""Budgets: setting them, checking spend against them, alerts, and holding a team's queue."""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from billing.models import Budget
from billing.periods import month_start
from billing.permissions import can_manage_billing
from billing.selectors.budgets import budgets_of_month
from billing.selectors.usage import team_spend
from queues.models import Team
from queues.services.audit import audit
from queues.services.holds import team_queue_hold
from queues.services.notifications import email_send_on_commit


def budget_set(
    *,
    actor,
    team: Team,
    month: date,
    amount: Decimal,
    kind: str = Budget.Kind.CURRENCY,
    currency: str = "EUR",
    thresholds: list[int] | None = None,
    enforce: bool = False,
) -> Budget:
    """Create or change a team's budget for a month; raising it releases a hold it caused."""
    if not can_manage_billing(actor):
        raise PermissionDenied("Only finance and platform admins set budgets.")
    errors = {}
    if amount is None or amount < 0:
        errors["amount"] = "The amount must be zero or more."
    if kind not in Budget.Kind.values:
        errors["kind"] = f"Choose one of: {', '.join(Budget.Kind.values)}."
    thresholds = sorted(set(thresholds or [50, 80, 100]))
    if any(not isinstance(t, int) or t <= 0 or t > 1000 for t in thresholds):
        errors["thresholds"] = "Thresholds are whole percentages between 1 and 1000."
    if errors:
        raise ValidationError(errors)
    month = month_start(month)
    with transaction.atomic():
        budget = Budget.objects.select_for_update().filter(team=team, month=month).first()
        before = None
        if budget is None:
            budget = Budget(team=team, month=month, created_by=actor)
        else:
            before = {"amount": str(budget.amount), "kind": budget.kind, "enforce": budget.enforce}
        raised = budget.pk is not None and amount > budget.amount
        budget.amount = amount
        budget.kind = kind
        budget.currency = currency.upper()
        budget.thresholds = thresholds
        budget.enforce = enforce
        if raised or budget.pk is None:
            # Alerts repeat against the new amount.
            budget.alerts_sent = []
        budget.save()
        audit(
            actor=actor,
            verb="budget.set",
            obj=budget,
            team=team,
            before=before,
            after={"amount": str(amount), "kind": kind, "enforce": enforce},
        )
    budget_check(budget=budget)
    return budget


def budget_check(*, budget: Budget, now: datetime | None = None) -> dict:
    """Compare spend with the budget: send due alerts, hold or release the team's queue."""
    now = now or timezone.now()
    spent = team_spend(team=budget.team, month=budget.month, kind=budget.kind)
    percent = (spent / budget.amount * 100) if budget.amount else Decimal(100 if spent else 0)
    due = [t for t in budget.thresholds if percent >= t and t not in budget.alerts_sent]
    current_month = month_start(now) == budget.month
    hold = budget.enforce and current_month and percent >= 100
    changed_hold = hold != budget.held
    with transaction.atomic():
        locked = Budget.objects.select_for_update().get(pk=budget.pk)
        locked.last_spent = spent.quantize(Decimal("0.01"))
        locked.last_checked_at = now
        if due:
            locked.alerts_sent = sorted(set(locked.alerts_sent) | set(due))
        locked.held = hold
        locked.save(update_fields=["last_spent", "last_checked_at", "alerts_sent", "held"])
        if due:
            audit(
                actor=None,
                verb="budget.alert",
                obj=locked,
                team=locked.team,
                after={"thresholds": due, "spent": str(locked.last_spent)},
                message=f"{locked.team} reached {max(due)} % of its {locked.month:%B %Y} budget.",
            )
    budget.refresh_from_db()
    if due:
        _budget_alert_mail(budget=budget, threshold=max(due), spent=spent)
    if changed_hold:
        _budget_hold(budget=budget, hold=hold)
    return {"spent": spent, "percent": percent, "alerts": due, "held": hold}


def _budget_alert_mail(*, budget: Budget, threshold: int, spent: Decimal) -> None:
    team = budget.team
    recipients = list(
        team.memberships.filter(role="lead").values_list("user__email", flat=True)
    ) + list(team.department.managers.values_list("email", flat=True))
    email_send_on_commit(
        recipients=recipients,
        subject=f"{team.name} has used {threshold} % of its budget",
        body=(
            f"{team.name} has spent {spent.quantize(Decimal('0.01'))} {budget.unit} of its "
            f"{budget.amount} {budget.unit} budget for {budget.month:%B %Y}.\n"
            + ("Its queue is held until the budget is raised.\n" if budget.held else "")
            + f"{settings.PORTAL_URL}/billing/teams/{team.slug}/"
        ),
    )


def _budget_hold(*, budget: Budget, hold: bool) -> None:
    team = budget.team
    if hold:
        if team.queue_hold_reason:
            return  # held already (by hand, say): the hold stays, with its reason
        reason = f"Budget for {budget.month:%B %Y} spent ({budget.amount} {budget.unit})."
    else:
        if not team.queue_hold_reason.startswith("Budget for"):
            return  # someone else holds the queue; not ours to release
        reason = None
    team_queue_hold(team=team, reason=reason, actor=None)


def budgets_release_past(*, now: datetime | None = None) -> int:
    """Release holds of budgets from months that have ended (the month turned)."""
    now = now or timezone.now()
    released = 0
    for budget in Budget.objects.select_related("team").filter(
        held=True, month__lt=month_start(now)
    ):
        Budget.objects.filter(pk=budget.pk).update(held=False)
        _budget_hold(budget=budget, hold=False)
        released += 1
    return released


def budgets_check_all(*, now: datetime | None = None) -> int:
    """Release the holds of past months' budgets, then check every budget of this month
    (budget_check); returns how many were checked."""
    now = now or timezone.now()
    budgets_release_past(now=now)
    checked = 0
    for budget in budgets_of_month(month=month_start(now)):
        budget_check(budget=budget, now=now)
        checked += 1
    return checked
