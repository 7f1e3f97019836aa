"""What several billing API views look up the same way: a month from the URL, a visible team."""

from datetime import date

from rest_framework.exceptions import NotFound, ValidationError

from billing.periods import parse_month
from billing.selectors.reports import billing_team_list
from queues.models import Team

MONTH_HELP = "Use YYYY-MM, e.g. 2026-10."


def month_or_400(text: str) -> date:
    """The month a `YYYY-MM` path segment names; a 400 with a hint when it names none."""
    month = parse_month(text)
    if month is None:
        raise ValidationError({"month": [MONTH_HELP]})
    return month


def visible_team(*, user, slug: str) -> Team:
    """A team by slug: 400 when it does not exist, 404 when the user may not see it."""
    team = Team.objects.filter(slug=slug).first()
    if team is None:
        raise ValidationError({"team": [f"Unknown team {slug!r}."]})
    if not billing_team_list(user=user).filter(pk=team.pk).exists():
        raise NotFound("No such team.")
    return team
