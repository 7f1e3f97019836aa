"""The audit trail of fleet's changes. fleet cannot import queues, which keeps the audit log
(AuditEvent): it announces each change a person makes with `changed`, sent inside the change's
transaction, and queues records it (queues.apps connects the receiver), so the change and its
audit event are committed together or not at all."""

from __future__ import annotations

from django.dispatch import Signal

# Sent with actor, verb, obj, before, after, message.
changed = Signal()


def fleet_audit(*, actor, verb: str, obj, before=None, after=None, message: str = "") -> None:
    """Record that `actor` did `verb` to `obj` (before/after: the fields that changed)."""
    changed.send(sender=type(obj), actor=actor, verb=verb, obj=obj, before=before, after=after,
                 message=message)  # fmt: skip


def snapshot(obj, fields) -> dict:
    """The named fields of a model instance as JSON can hold them (related objects by name)."""
    values = {}
    for name in fields:
        value = getattr(obj, name)
        values[name] = value if isinstance(value, (str, int, float, bool, list, dict,
                                                    type(None))) else str(value)  # fmt: skip
    return values


def changes(before: dict, after: dict) -> tuple[dict, dict]:
    """Only what differs between two snapshots, as (before, after)."""
    keys = [k for k in after if before.get(k) != after[k]]
    return {k: before.get(k) for k in keys}, {k: after[k] for k in keys}
