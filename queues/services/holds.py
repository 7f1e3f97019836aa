"""Holding a team's queues: no new job of the team is admitted while held, running ones finish."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction

from core.roles import is_platform_admin
from queues.models import Team
from queues.selectors.tenancy import user_manages_team
from queues.services.audit import audit
from queues.services.reconcile import reconcile_all_enqueue

HOLD_REASON_MAX = 300


def team_queue_hold(*, team: Team, reason: str | None, actor=None) -> Team:
    """Hold (reason given) or release (None/"") a team's queues; running jobs finish. Who may
    is for the caller to check (budgets call it with no actor)."""
    reason = (reason or "").strip()[:HOLD_REASON_MAX]
    with transaction.atomic():
        team = Team.objects.select_for_update().select_related("department").get(pk=team.pk)
        if team.queue_hold_reason == reason:
            return team
        before = {"queue_hold_reason": team.queue_hold_reason}
        team.queue_hold_reason = reason
        team.save(update_fields=["queue_hold_reason"])
        audit(
            actor=actor,
            verb="team.queue_hold" if reason else "team.queue_release",
            obj=team,
            team=team,
            before=before,
            after={"queue_hold_reason": reason},
            message=reason or "Queue released.",
        )
        reconcile_all_enqueue()
    return team


MANUAL_PREFIX = "Held by "


def team_hold_can_change(*, user, team: Team) -> bool:
    """Platform admins and the managers of the team's department hold and release by hand."""
    return is_platform_admin(user) or user_manages_team(user=user, team=team)


def team_hold(*, actor, team: Team, reason: str) -> Team:
    """Hold a team's queues by hand, with a reason the team sees (audited)."""
    if not team_hold_can_change(user=actor, team=team):
        raise PermissionDenied(
            f"Only platform admins and managers of {team.department.name} can hold its queues."
        )
    reason = " ".join((reason or "").split())
    if not reason:
        raise ValidationError({"reason": "Say why, so the team knows what to do about it."})
    text = f"{MANUAL_PREFIX}{actor.get_username()}: {reason}"
    if len(text) > HOLD_REASON_MAX:
        room = HOLD_REASON_MAX - len(text) + len(reason)
        raise ValidationError({"reason": f"Keep the reason to {room} characters."})
    return team_queue_hold(team=team, reason=text, actor=actor)


def team_release(*, actor, team: Team) -> Team:
    """Release a team's held queues by hand, whoever held them (audited)."""
    if not team_hold_can_change(user=actor, team=team):
        raise PermissionDenied(
            f"Only platform admins and managers of {team.department.name} can release its queues."
        )
    if not team.queue_hold_reason:
        raise ValidationError("The team's queues are not held.")
    return team_queue_hold(team=team, reason=None, actor=actor)
