"""Applying a proposal: the quota requests it implies, and the weights and sharing it sets."""

from __future__ import annotations

from decimal import Decimal

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from core.roles import is_platform_admin
from fleet.models import NodePool
from planning.models import WhatIfRun
from planning.services.whatif.proposal import whatif_teams
from queues.manifests.quotas import (
    fair_share_weight_text,
)
from queues.models import (
    Department,
    Quota,
    QuotaRequest,
)
from queues.services.audit import audit
from queues.services.fair_share import (
    department_fair_share_set,
    team_fair_share_set,
    team_member_fair_sharing_set,
)


def whatif_apply(*, actor, run: WhatIfRun) -> list[QuotaRequest]:
    """File the quota requests the proposal implies (each quota that differs from today's), on
    behalf of the teams, for the usual decision (not by the one who filed them)."""
    from queues.services.quotas import quota_request_create

    if not (run.created_by_id == actor.pk or is_platform_admin(actor)):
        raise PermissionDenied("Only who made the proposal (or a platform admin) applies it.")
    if run.state != WhatIfRun.State.DONE:
        raise ValidationError("Apply a proposal once its replay is done.")
    if run.applied_at is not None:
        raise ValidationError("This proposal has already been applied.")
    weights = run.proposal.get("weights", [])
    shared = run.proposal.get("member_fair_sharing", [])
    teams = whatif_teams(user=actor).in_bulk(
        [q["team"] for q in run.proposal.get("quotas", [])]
        + [w["team"] for w in weights]
        + [m["team"] for m in shared]
    )
    pools = NodePool.objects.in_bulk([q["pool"] for q in run.proposal.get("quotas", [])])
    current = {(q.team_id, q.pool_id): q for q in Quota.objects.filter(team_id__in=list(teams))}
    filed = []
    with transaction.atomic():
        locked = WhatIfRun.objects.select_for_update().get(pk=run.pk)
        if locked.applied_at is not None:
            raise ValidationError("This proposal has already been applied.")
        for q in run.proposal.get("quotas", []):
            team, pool = teams.get(q["team"]), pools.get(q["pool"])
            if team is None or pool is None:
                continue
            now_q = current.get((team.pk, pool.pk))
            values = (q["nominal_gpus"], q["borrowing_limit"], q["lending_limit"])
            if now_q and values == (now_q.nominal_gpus, now_q.borrowing_limit,
                                    now_q.lending_limit):  # fmt: skip
                continue
            filed.append(quota_request_create(
                actor=actor, team=team, pool=pool, nominal_gpus=values[0],
                borrowing_limit=values[1], lending_limit=values[2], on_behalf=True,
                justification=f"What-if proposal #{run.pk} “{run.name}”: replayed over the last "
                f"{run.days} days before filing.",
            ))  # fmt: skip
        weighed, sharing = {}, {}
        for w in weights:  # the weights are the managers' own to set: set at once (audited)
            team = teams.get(w["team"])
            if team is not None and team.fair_share_weight != Decimal(w["weight"]):
                team_fair_share_set(actor=actor, team=team, weight=w["weight"])
                weighed[team.slug] = w["weight"]
        for m in shared:  # so is sharing a team's queue among its members
            team = teams.get(m["team"])
            if team is not None and team.member_fair_sharing != m["enabled"]:
                team_member_fair_sharing_set(actor=actor, team=team, enabled=m["enabled"])
                sharing[team.slug] = m["enabled"]
        departments = {}
        for d in run.proposal.get("departments", []):  # the platform admins' own to set
            department = Department.objects.filter(pk=d["department"]).first()
            if department is None:
                continue
            changed = department_fair_share_set(
                actor=actor, department=department,
                shares_with_organisation=d["shares_with_organisation"], weight=d["weight"],
            )  # fmt: skip
            departments[changed.slug] = {
                "shares_with_organisation": changed.shares_with_organisation,
                "weight": fair_share_weight_text(changed.fair_share_weight),
            }
        locked.applied_at = timezone.now()
        locked.applied_requests = [r.pk for r in filed]
        locked.save(update_fields=["applied_at", "applied_requests"])
        audit(actor=actor, verb="whatif.apply", obj=locked,
              after={"quota_requests": locked.applied_requests,
                     "fair_share_weights": weighed, "member_fair_sharing": sharing,
                     "departments": departments})  # fmt: skip
    run.refresh_from_db()
    return filed
