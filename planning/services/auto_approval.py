"""Evidence-based quota: the admins' rule that approves an increase when the team's measured use
and the pool's capacity support it (QuotaAutoApproval explains the rule), and setting it.

The check runs when a request is filed (queues asks through its quota_request_filed hook, which
planning's AppConfig connects to on_quota_request_filed); whatever it decides is audited by
queues with the figures that decided it, so a manager reading a pending request sees why it was
not approved by the rule.
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction

from core.roles import is_platform_admin
from planning.models import QuotaAutoApproval
from planning.selectors.evidence import quota_evidence
from queues.models import Quota
from queues.selectors.quotas import pool_capacity
from queues.services.audit import audit

RULE_FIELDS = (
    "enabled", "min_usage_percent", "max_increase_gpus", "max_increase_percent", "lookback_days",
)  # fmt: skip
LIMITS = {
    "min_usage_percent": (1, 100),
    "max_increase_gpus": (1, 10000),
    "max_increase_percent": (1, 1000),
    "lookback_days": (1, 365),
}


def auto_approval_rule() -> QuotaAutoApproval:
    """The rule (a row of defaults, off, until an admin saves one)."""
    return QuotaAutoApproval.objects.first() or QuotaAutoApproval()


def quota_auto_check(*, quota_request, quota: Quota | None) -> tuple[bool, str, dict] | None:
    """Whether the rule approves this filed request: (yes/no, why, the figures), or None when
    the rule is off or the request is no plain increase of nominal quota (it does not apply)."""
    rule = auto_approval_rule()
    if not rule.enabled:
        return None
    current = quota.nominal_gpus if quota else 0
    asked = quota_request.nominal_gpus
    # A limit the request does not name stays as it is.
    same_limits = quota is not None and all(
        not named or asked == now
        for named, asked, now in (
            (quota_request.sets_borrowing_limit, quota_request.borrowing_limit,
             quota.borrowing_limit),
            (quota_request.sets_lending_limit, quota_request.lending_limit, quota.lending_limit),
        )
    )  # fmt: skip
    if asked <= current or not same_limits or quota_request.ends_at is not None:
        return None
    increase = asked - current
    evidence = quota_evidence(
        teams=[quota_request.team], pool=quota_request.pool, days=rule.lookback_days
    )
    figures = dict(evidence[0]["figures"]) if evidence else {"hours_with_data": 0}
    room = pool_capacity(pool=quota_request.pool, exclude_team=quota_request.team)
    figures.update(increase=increase, capacity_left=room["left"], rule={
        f: getattr(rule, f) for f in RULE_FIELDS if f != "enabled"
    })  # fmt: skip
    usage = figures.get("usage_percent_p90")
    reasons = []
    if not current:
        reasons.append("the team has no quota in the pool to measure its use of")
    if increase > rule.max_increase_gpus:
        reasons.append(f"+{increase} GPUs is more than the rule's {rule.max_increase_gpus}")
    if current and increase * 100 > rule.max_increase_percent * current:
        reasons.append(f"+{increase} is more than {rule.max_increase_percent} % of {current}")
    if not figures.get("hours_with_data"):
        reasons.append(f"no measured use in the last {rule.lookback_days} days")
    elif usage is not None and usage < rule.min_usage_percent:
        reasons.append(
            f"its p90 use is {figures['use_p90']:g} of {current} GPUs ({usage:g} %), below "
            f"the rule's {rule.min_usage_percent} %"
        )
    if not quota_request.pool.allow_oversubscription and asked > room["left"]:
        reasons.append(f"only {max(0, room['left'])} GPUs are left in the pool beside the "
                       "other teams' quota")  # fmt: skip
    if reasons:
        return False, "Not approved automatically: " + "; ".join(reasons) + ".", figures
    return (
        True,
        f"Approved automatically on evidence: p90 use {figures['use_p90']:g} of {current} GPUs "
        f"({usage:g} % ≥ {rule.min_usage_percent} %) over {rule.lookback_days} days; +{increase} "
        f"GPUs within the rule's limits; {room['left']} GPUs left in the pool.",
        figures,
    )


def on_quota_request_filed(*, quota_request, quota: Quota | None, **_signal):
    """queues' quota_request_filed hook: the rule's decision on the request (quota_auto_check)."""
    return quota_auto_check(quota_request=quota_request, quota=quota)


def quota_auto_approval_set(*, actor, **fields) -> QuotaAutoApproval:
    """Change the rule (platform admins); audited with before and after."""
    if not is_platform_admin(actor):
        raise PermissionDenied("Only platform admins set the quota auto-approval rule.")
    unknown = set(fields) - set(RULE_FIELDS)
    if unknown:
        raise ValidationError(f"Unknown fields: {', '.join(sorted(unknown))}.")
    errors = {}
    for name, (low, high) in LIMITS.items():
        if name in fields:
            value = fields[name]
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                errors[name] = f"Enter a whole number from {low} to {high}."
    if "enabled" in fields and not isinstance(fields["enabled"], bool):
        errors["enabled"] = "Enter true or false."
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        rule = QuotaAutoApproval.objects.select_for_update().first() or QuotaAutoApproval()
        before = {f: getattr(rule, f) for f in RULE_FIELDS} if rule.pk else None
        for name, value in fields.items():
            setattr(rule, name, value)
        rule.save()
        audit(actor=actor, verb="quota_auto_approval.change", obj=rule, before=before,
              after={f: getattr(rule, f) for f in RULE_FIELDS})  # fmt: skip
    return rule
