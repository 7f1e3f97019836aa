"""Who may do what in billing (pages and API)."""

from rest_framework.permissions import SAFE_METHODS, BasePermission

from core.roles import is_finance, is_platform_admin


def can_manage_billing(user) -> bool:
    """Finance and platform admins set prices and budgets and close months."""
    return is_finance(user) or is_platform_admin(user)


class FinanceWritesOthersRead(BasePermission):
    """Everyone signed in reads what their selector allows; finance and admins write."""

    message = "Only finance and platform admins can change prices and budgets."

    def has_permission(self, request, view):
        if not (request.user and request.user.is_authenticated):
            return False
        return request.method in SAFE_METHODS or can_manage_billing(request.user)
