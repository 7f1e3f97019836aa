"""API permissions for people and tenancy."""

from rest_framework.permissions import SAFE_METHODS, BasePermission

from queues.roles import is_platform_admin


class IsPlatformAdminOrReadOnly(BasePermission):
    """Everyone authenticated reads what their selector allows; only platform admins write."""

    message = "Only platform admins can change departments and teams."

    def has_permission(self, request, view):
        if not (request.user and request.user.is_authenticated):
            return False
        return request.method in SAFE_METHODS or is_platform_admin(request.user)
