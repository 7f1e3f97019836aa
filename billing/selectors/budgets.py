"""Budget reads: the budgets of the teams a user sees."""

from datetime import date

from django.db.models import QuerySet

from billing.models import Budget
from billing.selectors.reports import billing_team_list


def budget_list(*, user) -> QuerySet[Budget]:
    """Budgets of the teams whose figures the user may see."""
    return Budget.objects.select_related("team", "team__department").filter(
        team__in=billing_team_list(user=user)
    )


def budgets_of_month(*, month: date) -> QuerySet[Budget]:
    """Every team's budget for a month, with the team and department the checks read."""
    return Budget.objects.select_related("team", "team__department").filter(month=month)
