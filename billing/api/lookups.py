"""What several billing API views look up the same way: a month from the URL, a visible team."""

from datetime import date

from rest_framework.exceptions import NotFound, ValidationError

from billing.periods import FIRST_YEAR, LAST_YEAR, parse_month
from billing.selectors.reports import billing_team_list
from queues.models import Team

MONTH_HELP = f"Use YYYY-MM with a year from {FIRST_YEAR} to {LAST_YEAR}, e.g. 2026-10."


def month_or_400(text: str) -> date:
    """The month a `YYYY-MM` path segment names; a 400 with a hint when it names none."""
    month = parse_month(text)
    if month is None:
        raise ValidationError({"month": [MONTH_HELP]})
    return month


def visible_team(*, user, slug: str, field: bool = False) -> Team:
    """A team by slug the user may see. One that does not exist and one they may not see
    answer the same, so nobody learns which teams exist: a 404, or with `field` (a team named
    in a request body) a 400 on the team field."""
    team = billing_team_list(user=user).filter(slug=slug).first()
    if team is None:
        message = f"No team {slug[:63]!r} that you can see."
        raise ValidationError({"team": [message]}) if field else NotFound(message)
    return team
