"""Portal-wide roles that are Django groups, and the checks every page and endpoint uses."""

GROUP_MANAGERS = "managers"
GROUP_FINANCE = "finance"
GROUP_PLATFORM_ADMINS = "platform-admins"
ROLE_GROUPS = (GROUP_MANAGERS, GROUP_FINANCE, GROUP_PLATFORM_ADMINS)


def _group_names(user) -> frozenset[str]:
    # Cached on the user object: navigation and permissions ask several times per request.
    cached = getattr(user, "_qm_group_names", None)
    if cached is None:
        cached = frozenset(user.groups.values_list("name", flat=True))
        user._qm_group_names = cached
    return cached


def is_platform_admin(user) -> bool:
    """Superusers and members of the platform-admins group."""
    if not user.is_authenticated:
        return False
    return user.is_superuser or GROUP_PLATFORM_ADMINS in _group_names(user)


def is_finance(user) -> bool:
    """Members of the finance group."""
    return user.is_authenticated and GROUP_FINANCE in _group_names(user)


def is_manager(user) -> bool:
    """Managers of at least one department (or members of the managers group)."""
    if not user.is_authenticated:
        return False
    if GROUP_MANAGERS in _group_names(user):
        return True
    return user.managed_departments.exists()


def sees_everything(user) -> bool:
    """Finance and platform admins see every department and team."""
    return is_platform_admin(user) or is_finance(user)
