"""Who may do what in fleet: platform admins manage; every logged-in user reads pools."""

from django.core.exceptions import PermissionDenied
from rest_framework.permissions import SAFE_METHODS, BasePermission

# The group queues.roles also names; fleet sits below queues, so it cannot import it.
GROUP_PLATFORM_ADMINS = "platform-admins"


def is_platform_admin(user) -> bool:
    """Superusers and members of the platform-admins group."""
    if user is None or not user.is_authenticated:
        return False
    if user.is_superuser:
        return True
    # Same per-request cache attribute as queues.roles, so both share one query.
    cached = getattr(user, "_qm_group_names", None)
    if cached is None:
        cached = frozenset(user.groups.values_list("name", flat=True))
        user._qm_group_names = cached
    return GROUP_PLATFORM_ADMINS in cached


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
