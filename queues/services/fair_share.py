"""Kueue fair sharing per team: the weight of its ClusterQueue, and sharing its queue fairly
among its members (admission fair sharing), set by managers and admins; and per department:
sharing idle GPUs across the organisation and its weight there, set by platform admins."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction

from core.roles import is_platform_admin
from queues.manifests.quotas import fair_share_weight_text
from queues.models import Department, Membership, Team
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


def team_member_fair_sharing_set(
    *, actor, team: Team, enabled: bool | None = None, weights: dict | None = None
) -> Team:
    """Share a team's queue fairly among its members, or stop (`enabled`), and set members'
    weights (`weights`: {username: weight}); audited, rendered into the team's ClusterQueue
    (Kueue's admission fair sharing) and the members' own LocalQueues.

    Platform admins and the managers of the team's department may, as for the team's weight.
    A member's jobs wait in their own LocalQueue, and the queue serves the member whose recent
    use (halved every half-life, divided by their weight) is lowest first."""
    if not team_hold_can_change(user=actor, team=team):
        raise PermissionDenied(
            f"Only platform admins and managers of {team.department.name} decide how its teams "
            "share their queues among members."
        )
    if enabled is not None and not isinstance(enabled, bool):
        raise ValidationError({"enabled": "Give true or false."})
    if weights is not None and not isinstance(weights, dict):
        raise ValidationError({"weights": "Give an object of username: weight."})
    members = {
        m.user.username: m for m in Membership.objects.filter(team=team).select_related("user")
    }
    errors, clean = {}, {}
    for username, value in (weights or {}).items():
        if username not in members:
            errors[f"weights.{username}"] = f"{username} is not a member of {team.name}."
            continue
        try:
            clean[username] = parse_fair_share_weight(value)
        except ValidationError as exc:
            errors[f"weights.{username}"] = exc.message_dict["weight"][0]
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        team = Team.objects.select_for_update().select_related("department").get(pk=team.pk)
        before, after = {}, {}
        if enabled is not None and team.member_fair_sharing != enabled:
            before["member_fair_sharing"], after["member_fair_sharing"] = not enabled, enabled
            team.member_fair_sharing = enabled
            team.save(update_fields=["member_fair_sharing"])
        for username, weight in clean.items():
            membership = members[username]
            if membership.fair_share_weight == weight:
                continue
            key = f"weight of {username}"
            before[key] = fair_share_weight_text(membership.fair_share_weight)
            after[key] = fair_share_weight_text(weight)
            Membership.objects.filter(pk=membership.pk).update(fair_share_weight=weight)
        if not after:
            return team
        said = []
        if "member_fair_sharing" in after:
            said.append("Shares its queue fairly among members." if enabled
                        else "Stopped sharing its queue fairly among members.")  # fmt: skip
        said += [f"{k[len('weight of '):]}'s weight {before[k]} → {v}." for k, v in after.items()
                 if k.startswith("weight of ")]  # fmt: skip
        audit(
            actor=actor,
            verb="team.member_fair_sharing",
            obj=team,
            team=team,
            before=before,
            after=after,
            message=" ".join(said),
        )
        reconcile_all_enqueue()
    return team


def department_fair_share_set(
    *, actor, department: Department, shares_with_organisation=None, weight=None
) -> Department:
    """Let a department share its teams' idle GPUs with the organisation, or stop
    (`shares_with_organisation`), and set its fair-sharing weight among the departments that
    share (`weight`); audited, rendered into its Cohort on every Kueue cluster (the
    organisation's Cohort as its parent, the weight as spec.fairSharing.weight).

    Platform admins only: sharing moves GPUs between departments, which no department's
    managers decide for the others."""
    if not is_platform_admin(actor):
        raise PermissionDenied(
            "Only platform admins decide how departments share idle GPUs across the organisation."
        )
    errors = {}
    if shares_with_organisation is not None and not isinstance(shares_with_organisation, bool):
        errors["shares_with_organisation"] = "Give true or false."
    if weight is not None:
        try:
            weight = parse_fair_share_weight(weight)
        except ValidationError as exc:
            errors["weight"] = exc.message_dict["weight"][0]
    if shares_with_organisation is None and weight is None and not errors:
        errors["shares_with_organisation"] = "Give shares_with_organisation, weight, or both."
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        department = Department.objects.select_for_update().get(pk=department.pk)
        before, after, said = {}, {}, []
        if (shares_with_organisation is not None
                and department.shares_with_organisation != shares_with_organisation):  # fmt: skip
            before["shares_with_organisation"] = department.shares_with_organisation
            after["shares_with_organisation"] = shares_with_organisation
            department.shares_with_organisation = shares_with_organisation
            said.append("Shares idle GPUs with the organisation." if shares_with_organisation
                        else "Stopped sharing idle GPUs with the organisation.")  # fmt: skip
        if weight is not None and department.fair_share_weight != weight:
            before["fair_share_weight"] = fair_share_weight_text(department.fair_share_weight)
            after["fair_share_weight"] = fair_share_weight_text(weight)
            department.fair_share_weight = weight
            said.append(f"Fair-sharing weight {before['fair_share_weight']} → "
                        f"{after['fair_share_weight']}.")  # fmt: skip
        if not after:
            return department
        department.save(update_fields=[*after])
        audit(actor=actor, verb="department.fair_share", obj=department, department=department,
              before=before, after=after, message=" ".join(said))  # fmt: skip
        reconcile_all_enqueue()
    return department
