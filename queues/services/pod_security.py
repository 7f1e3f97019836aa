"""A team's exemption from the Pod Security defaults (queues.manifests.podsecurity): decided by
platform admins only, with a reason the audit log keeps beside who decided, and rendered into
the team's namespace and jobs in every cluster by the reconcile it enqueues."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction

from core.roles import is_platform_admin
from queues.models import Team
from queues.services.audit import audit
from queues.services.reconcile import reconcile_all_enqueue

REASON_MAX = 1000


def team_pod_security_set(*, actor, team: Team, exempt: bool, reason: str = "") -> Team:
    """Exempt a team from the Pod Security defaults (with a reason), or end its exemption."""
    if not is_platform_admin(actor):
        raise PermissionDenied(
            "Only platform admins decide whether a team is exempt from Pod Security."
        )
    reason = " ".join((reason or "").split())
    if exempt and not reason:
        raise ValidationError(
            {"reason": "Say why the team needs it (the audit log keeps it, for the next review)."}
        )
    if len(reason) > REASON_MAX:
        raise ValidationError({"reason": f"At most {REASON_MAX} characters."})
    with transaction.atomic():
        team = Team.objects.select_for_update().get(pk=team.pk)
        kept = reason if exempt else ""
        if team.pod_security_exempt == exempt and team.pod_security_exempt_reason == kept:
            return team
        before = {"pod_security_exempt": team.pod_security_exempt}
        if team.pod_security_exempt:
            before["reason"] = team.pod_security_exempt_reason
        team.pod_security_exempt, team.pod_security_exempt_reason = exempt, kept
        team.save(update_fields=["pod_security_exempt", "pod_security_exempt_reason"])
        what = "exempt from" if exempt else "back under"
        audit(
            actor=actor,
            verb="team.pod_security",
            obj=team,
            team=team,
            before=before,
            after={"pod_security_exempt": exempt, "reason": reason},
            message=f"{team.name} is {what} the Pod Security defaults"
            + (f": {reason}" if reason else "."),
        )
        reconcile_all_enqueue()
    return team


def team_pod_security(*, team: Team) -> dict:
    """What the team page and the API show."""
    return {
        "exempt": team.pod_security_exempt,
        "reason": team.pod_security_exempt_reason,
        "enforced": "privileged" if team.pod_security_exempt else "baseline",
    }
