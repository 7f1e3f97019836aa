"""Kueue fair sharing per team: the weight of its ClusterQueue, set by managers and admins."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction

from queues.manifests.quotas import fair_share_weight_text
from queues.models import Team
from queues.models.tenancy import FAIR_SHARE_WEIGHT_MAX
from queues.services.audit import audit
from queues.services.holds import team_hold_can_change
from queues.services.reconcile import reconcile_all_enqueue


def parse_fair_share_weight(value) -> Decimal:
    """A weight from a form or a request, or a ValidationError on "weight" saying what to fix."""
    try:
        weight = Decimal(str(value).strip())
        if not weight.is_finite():
            raise InvalidOperation
    except (InvalidOperation, ValueError, TypeError):
        raise ValidationError({"weight": "Enter a number, e.g. 2 or 0.5."}) from None
    if weight < 0 or weight > FAIR_SHARE_WEIGHT_MAX:
        raise ValidationError(
            {"weight": f"Enter a weight from 0 to {FAIR_SHARE_WEIGHT_MAX}; 1 is the default."}
        )
    if weight.as_tuple().exponent < -3:
        raise ValidationError({"weight": "Use at most three decimal places."})
    return weight


def team_fair_share_set(*, actor, team: Team, weight) -> Team:
    """Set a team's fair-sharing weight (audited) and render it into its ClusterQueues.

    Platform admins and the managers of the team's department may, as for holds: the weight
    decides how the department's idle GPUs are shared between its teams."""
    if not team_hold_can_change(user=actor, team=team):
        raise PermissionDenied(
            f"Only platform admins and managers of {team.department.name} set its teams' "
            "fair-sharing weights."
        )
    weight = parse_fair_share_weight(weight)
    with transaction.atomic():
        team = Team.objects.select_for_update().select_related("department").get(pk=team.pk)
        if team.fair_share_weight == weight:
            return team
        before = fair_share_weight_text(team.fair_share_weight)
        team.fair_share_weight = weight
        team.save(update_fields=["fair_share_weight"])
        after = fair_share_weight_text(weight)
        audit(
            actor=actor,
            verb="team.fair_share_weight",
            obj=team,
            team=team,
            before={"fair_share_weight": before},
            after={"fair_share_weight": after},
            message=f"Fair-sharing weight {before} → {after}.",
        )
        reconcile_all_enqueue()
    return team
