"""Writes for priority tiers (platform admins): each tier becomes a WorkloadPriorityClass or a
PriorityClass in every cluster."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction

from core.roles import is_platform_admin
from queues.manifests.protection import NAME_MAX, SPACING
from queues.models import PriorityTier
from queues.services.audit import audit
from queues.services.reconcile import reconcile_all_enqueue

TIER_FIELDS = (
    "name", "value", "preemptible", "is_default", "description", "idle_threshold_percent",
    "idle_after_minutes", "idle_grace_minutes", "idle_action", "protection_minutes",
)  # fmt: skip


def _check_promise(tier: PriorityTier) -> None:
    """ "Not preemptible" must be true within a team: Kueue and the scheduler preempt only for a
    higher value, so such a tier must outrank every preemptible one (and every preemptible tier
    stay below the protected ones). GPUs a job borrows from other teams can still be reclaimed
    by their owners; the tier's description says so."""
    others = PriorityTier.objects.exclude(pk=tier.pk) if tier.pk else PriorityTier.objects.all()
    if not tier.preemptible:
        above = others.filter(preemptible=True, value__gte=tier.value).order_by("-value").first()
        if above is not None:
            raise ValidationError(
                {
                    "value": f"A tier that is not preemptible must outrank every preemptible "
                    f"one: {above.name} has {above.value}. Use a value above {above.value}."
                }
            )
    else:
        below = others.filter(preemptible=False, value__lte=tier.value).order_by("value").first()
        if below is not None:
            raise ValidationError(
                {
                    "value": f"{below.name} is not preemptible and has {below.value}: a "
                    f"preemptible tier must stay below it. Use a value under {below.value}."
                }
            )


def _check_protection(tier: PriorityTier) -> None:
    """Protection gives every tier lowered classes down to SPACING-1 below its value
    (queues.manifests.protection): tiers must then lie that far apart, with names short enough
    for the classes' names."""
    others = list(
        PriorityTier.objects.exclude(pk=tier.pk) if tier.pk else PriorityTier.objects.all()
    )
    if not (tier.protection_minutes or any(t.protection_minutes for t in others)):
        return
    close = next((t for t in others if abs(t.value - tier.value) < SPACING), None)
    if close is not None:
        field = "protection_minutes" if tier.protection_minutes else "value"
        raise ValidationError(
            {
                field: f"With preemption protection on, tiers' values must be at least {SPACING} "
                f"apart (running jobs move up to {SPACING - 1} below their tier): {close.name} "
                f"has {close.value}."
            }
        )
    long = next((t for t in [tier, *others] if len(t.name) > NAME_MAX), None)
    if long is not None:
        raise ValidationError(
            {
                "name" if long is tier else "protection_minutes": f"With preemption protection "
                f"on, tier names have at most {NAME_MAX} characters: {long.name} is longer."
            }
        )


def tier_save(*, actor, tier: PriorityTier | None = None, **fields) -> PriorityTier:
    """Create or change a priority tier (platform admins); reconciles every cluster."""
    if not is_platform_admin(actor):
        raise PermissionDenied("Only platform admins can change priority tiers.")
    unknown = set(fields) - set(TIER_FIELDS)
    if unknown:
        raise ValidationError(f"Unknown tier fields: {', '.join(sorted(unknown))}.")
    with transaction.atomic():
        creating = tier is None
        tier = (
            PriorityTier() if creating else PriorityTier.objects.select_for_update().get(pk=tier.pk)
        )
        before = None if creating else {f: getattr(tier, f) for f in TIER_FIELDS}
        for name, value in fields.items():
            setattr(tier, name, value)
        _check_promise(tier)
        _check_protection(tier)
        if tier.is_default:
            # One default tier: the new default replaces the old one.
            others = PriorityTier.objects.filter(is_default=True)
            if tier.pk:
                others = others.exclude(pk=tier.pk)
            others.update(is_default=False)
        tier.full_clean()
        tier.save()
        audit(
            actor=actor,
            verb="tier.create" if creating else "tier.change",
            obj=tier,
            before=before,
            after={f: getattr(tier, f) for f in TIER_FIELDS},
        )
        reconcile_all_enqueue()
    return tier
