"""Portal-wide roles that are Django groups. They live in fleet, the lowest app, so that every
app can ask them; queues.roles adds the roles that depend on departments (managers)."""

from config.principal import principal_part

GROUP_MANAGERS = "managers"
GROUP_FINANCE = "finance"
GROUP_PLATFORM_ADMINS = "platform-admins"
ROLE_GROUPS = (GROUP_MANAGERS, GROUP_FINANCE, GROUP_PLATFORM_ADMINS)


def group_names(user) -> frozenset[str]:
    """The user's group names (kept for the request, and between requests: config.principal)."""
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
