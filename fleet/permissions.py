"""Who may do what in fleet: platform admins manage; every logged-in user reads pools."""

from django.core.exceptions import PermissionDenied
from rest_framework.permissions import SAFE_METHODS, BasePermission

from core.roles import is_platform_admin

__all__ = [
    "IsPlatformAdmin",
    "IsPlatformAdminOrReadOnly",
    "is_platform_admin",
    "require_platform_admin",
]


class IsPlatformAdmin(BasePermission):
    """Platform admins only (clusters, nodes, sync)."""

    message = "Only platform admins can see and manage clusters and nodes."

    def has_permission(self, request, view):
        return is_platform_admin(request.user)


class IsPlatformAdminOrReadOnly(BasePermission):
    """Any logged-in user reads; only platform admins write."""

    message = "Only platform admins can change node pools and GPU models."

    def has_permission(self, request, view):
        if not (request.user and request.user.is_authenticated):
            return False
        return request.method in SAFE_METHODS or is_platform_admin(request.user)


def require_platform_admin(actor) -> None:
    """Raise PermissionDenied unless the actor is a platform admin (services call this)."""
    if not is_platform_admin(actor):
        raise PermissionDenied("Only platform admins can manage clusters and node pools.")
