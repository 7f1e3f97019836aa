"""API permissions every app uses."""

from rest_framework.permissions import SAFE_METHODS, BasePermission

from core.roles import is_platform_admin


class IsPlatformAdminOrReadOnly(BasePermission):
    """Everyone authenticated reads what their selector allows; only platform admins write.
    The refusal names what the view changes (its `admin_writes`, e.g. "priority tiers")."""

    def has_permission(self, request, view):
        self.message = f"Only platform admins can change {getattr(view, 'admin_writes', 'this')}."
        if not (request.user and request.user.is_authenticated):
            return False
        if request.method in SAFE_METHODS or is_platform_admin(request.user):
            return True
        # On one object, first find it among those the caller sees (404 for the others), then
        # refuse the change (has_object_permission): a 403 never tells that an object exists.
        return bool(getattr(view, "detail", False))

    def has_object_permission(self, request, view, obj):
        return request.method in SAFE_METHODS or is_platform_admin(request.user)
