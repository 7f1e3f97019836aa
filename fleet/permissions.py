"""Who may do what in fleet: platform admins manage; every logged-in user reads pools (through
core.permissions.IsPlatformAdminOrReadOnly)."""

from django.core.exceptions import PermissionDenied
from rest_framework.permissions import BasePermission

from core.roles import is_platform_admin

__all__ = [
    "IsPlatformAdmin",
    "is_platform_admin",
    "require_platform_admin",
]


class IsPlatformAdmin(BasePermission):
    """Platform admins only (clusters, nodes, sync)."""

    message = "Only platform admins can see and manage clusters and nodes."

    def has_permission(self, request, view):
        return is_platform_admin(request.user)


def require_platform_admin(actor) -> None:
    """Raise PermissionDenied unless the actor is a platform admin (services call this)."""
    if not is_platform_admin(actor):
        raise PermissionDenied("Only platform admins can manage clusters and node pools.")
