"""Template tags other apps' pages use to show billing figures (e.g. a team's spend)."""

from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation

from django import template
from django.utils import timezone

from billing.periods import month_start
from billing.pricing import gpu_hours as to_hours
from billing.selectors.reports import team_report

register = template.Library()


@register.inclusion_tag("billing/_team_summary.html")
def billing_team_summary(team):
    """This month's allocated/used GPU-hours, cost and budget status (with alerts) of a team."""
    report = team_report(team=team, month=month_start(timezone.now()))
    row = report["teams"][0] if report["teams"] else None
    return {"team": team, "summary": row, "currency": report.get("currency", "")}


@register.filter
def gpu_hours(seconds):
    """GPU-seconds as GPU-hours, to four decimals."""
    return to_hours(seconds or 0)


SHOWN_HOURS = Decimal("0.01")


@register.filter
def hours(value):
    """GPU-hours as pages show them, to two decimals (exports and the API keep all four)."""
    try:
        return Decimal(str(value)).quantize(SHOWN_HOURS, ROUND_HALF_EVEN)
    except (InvalidOperation, ValueError, TypeError):
        return value
