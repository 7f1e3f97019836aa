"""The one way to write the audit log: who did what to which object, before/after, diff."""

from __future__ import annotations

from queues.models import AuditEvent, Department, Team


def audit(
    *,
    actor,
    verb: str,
    obj,
    team: Team | None = None,
    department: Department | None = None,
    before=None,
    after=None,
    manifest_diff: str = "",
    message: str = "",
) -> AuditEvent:
    """Record who did what to which object (with before/after and a manifest diff)."""
    if department is None and team is not None:
        department = team.department
    return AuditEvent.objects.create(
        actor=actor if actor is not None and actor.is_authenticated else None,
        verb=verb,
        object_type=obj._meta.model_name if obj is not None else "",
        object_id=str(obj.pk) if obj is not None and obj.pk is not None else "",
        object_repr=str(obj)[:255] if obj is not None else "",
        team=team,
        department=department,
        before=before,
        after=after,
        manifest_diff=manifest_diff,
        message=message,
    )


def on_fleet_changed(sender, *, actor, verb, obj, before=None, after=None, message="", **extra):
    """fleet.audit's `changed` (sent inside the change's transaction): audit it."""
    audit(actor=actor, verb=verb, obj=obj, before=before, after=after, message=message)
