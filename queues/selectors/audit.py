"""Reads of the audit log: platform admins see every event, managers their departments'."""

from django.db.models import Q, QuerySet

from core.roles import is_platform_admin
from queues.models import AuditEvent


def audit_event_list(*, user) -> QuerySet[AuditEvent]:
    """Platform admins see every event; managers their departments'; others none."""
    qs = AuditEvent.objects.select_related("actor", "team", "department")
    if is_platform_admin(user):
        return qs
    if not user.is_authenticated:
        return qs.none()
    return qs.filter(Q(department__managers=user) | Q(team__department__managers=user)).distinct()
