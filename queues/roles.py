"""Roles every page and endpoint checks: the group roles from fleet.roles, plus managers."""

from config.principal import principal_part
from fleet.roles import (
    GROUP_FINANCE,
    GROUP_MANAGERS,
    GROUP_PLATFORM_ADMINS,
    ROLE_GROUPS,
    group_names,
    is_finance,
    is_platform_admin,
)

__all__ = [
    "GROUP_FINANCE",
    "GROUP_MANAGERS",
    "GROUP_PLATFORM_ADMINS",
    "ROLE_GROUPS",
    "is_finance",
    "is_manager",
    "is_platform_admin",
    "sees_everything",
]


def is_manager(user) -> bool:
    """Managers of at least one department (or members of the managers group)."""
    if not user.is_authenticated:
        return False
    if GROUP_MANAGERS in group_names(user):
        return True
    return principal_part(user, "manages", lambda: user.managed_departments.exists())


def sees_everything(user) -> bool:
    """Finance and platform admins see every department and team."""
    return is_platform_admin(user) or is_finance(user)
