"""Holding a team's queues: no new job of the team is admitted while held, running ones finish."""

from __future__ import annotations

from django.db import transaction

from queues.models import Team
from queues.services.audit import audit
from queues.services.reconcile import reconcile_all_enqueue


def team_queue_hold(*, team: Team, reason: str | None, actor=None) -> Team:
    """Hold (reason given) or release (None/"") a team's queues; running jobs finish."""
    reason = (reason or "").strip()[:300]
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
