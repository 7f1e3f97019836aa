"""Roles every page and endpoint checks. Portal-wide roles are Django groups (managers, finance,
platform admins); a manager is also anyone who manages a department. Kept for the request and
between requests by core.principal."""

from core.principal import principal_part

GROUP_MANAGERS = "managers"
GROUP_FINANCE = "finance"
GROUP_PLATFORM_ADMINS = "platform-admins"
ROLE_GROUPS = (GROUP_MANAGERS, GROUP_FINANCE, GROUP_PLATFORM_ADMINS)


def group_names(user) -> frozenset[str]:
    """The user's group names (kept for the request, and between requests: core.principal)."""
    return principal_part(
        user, "groups", lambda: frozenset(user.groups.values_list("name", flat=True))
    )


def is_platform_admin(user) -> bool:
    """Superusers and members of the platform-admins group."""
    if user is None or not user.is_authenticated:
        return False
    return user.is_superuser or GROUP_PLATFORM_ADMINS in group_names(user)


def is_finance(user) -> bool:
    """Members of the finance group."""
    return user is not None and user.is_authenticated and GROUP_FINANCE in group_names(user)


def is_manager(user) -> bool:
    """Managers of at least one department (or members of the managers group). A department's
    managers are the users it names (queues' Department.managers, read here through the user's
    `managed_departments`, so that core imports no app)."""
    if not user.is_authenticated:
        return False
    if GROUP_MANAGERS in group_names(user):
        return True
    return principal_part(user, "manages", lambda: user.managed_departments.exists())


def sees_everything(user) -> bool:
    """Finance and platform admins see every department and team."""
    return is_platform_admin(user) or is_finance(user)
