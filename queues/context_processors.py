"""Template context: the user's roles, for navigation."""

from django.utils.functional import cached_property

from core.roles import is_finance, is_manager, is_platform_admin


class NavRoles:
    """The user's roles, each asked only when a template reads it: most pages show only what
    platform admins see, and asking whether the user manages a department costs a query."""

    def __init__(self, user):
        self._user = user

    @cached_property
    def is_manager(self) -> bool:
        return is_manager(self._user)

    @cached_property
    def is_finance(self) -> bool:
        return is_finance(self._user)

    @cached_property
    def is_platform_admin(self) -> bool:
        return is_platform_admin(self._user)


def roles(request):
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {"nav": NavRoles(user)}
