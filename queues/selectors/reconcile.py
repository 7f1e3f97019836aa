"""Reads of the cluster objects the portal manages (platform admins only)."""

from django.db.models import QuerySet

from core.roles import is_platform_admin
from queues.models import ManagedObject


def managed_object_list(*, user) -> QuerySet:
    """The cluster objects the portal manages (platform admins only)."""
    if not is_platform_admin(user):
        return ManagedObject.objects.none()
    return ManagedObject.objects.select_related("cluster").defer("desired", "applied_manifest")
