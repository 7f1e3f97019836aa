"""Template context: the user's roles, for navigation."""

from queues.roles import is_finance, is_manager, is_platform_admin


def roles(request):
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {
        "nav": {
            "is_manager": is_manager(user),
            "is_finance": is_finance(user),
            "is_platform_admin": is_platform_admin(user),
        }
    }
