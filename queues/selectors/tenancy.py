"""Reads, and the one place that decides which departments, teams and memberships a user sees."""

from django.contrib.auth import get_user_model
from django.db.models import Q, QuerySet

from core.principal import principal_part
from core.roles import is_finance, is_manager, is_platform_admin, sees_everything
from queues.models import ApiToken, Department, Membership, Team


def department_list(*, user) -> QuerySet[Department]:
    """Departments the user may see: all for finance/admins, managed or own teams' otherwise."""
    qs = Department.objects.prefetch_related("managers")
    if not user.is_authenticated:
        return qs.none()
    if sees_everything(user):
        return qs
    return qs.filter(Q(managers=user) | Q(teams__memberships__user=user)).distinct()


def team_list(*, user) -> QuerySet[Team]:
    """Teams the user may see: all for finance/admins, the department's for its managers,
    the user's own teams otherwise."""
    qs = Team.objects.select_related("department")
    if not user.is_authenticated:
        return qs.none()
    if sees_everything(user):
        return qs
    return qs.filter(Q(memberships__user=user) | Q(department__managers=user)).distinct()


def team_ids_visible(*, user) -> list[int] | None:
    """Ids of the teams team_list gives the user; None for who sees every team. Kept for the
    request (a job page asks in several selectors) and between requests (core.principal)."""
    if not user.is_authenticated:
        return []
    if sees_everything(user):
        return None
    return principal_part(
        user, "teams", lambda: list(team_list(user=user).order_by().values_list("pk", flat=True))
    )


def membership_list(*, user) -> QuerySet[Membership]:
    """Memberships of the teams the user may see."""
    return Membership.objects.select_related("user", "team", "team__department").filter(
        team__in=team_list(user=user)
    )


def team_get(*, user, slug: str) -> Team:
    """One visible team by slug; raises Team.DoesNotExist for invisible ones (so 404)."""
    visible = team_ids_visible(user=user)
    # By slug alone, then checked against the visible ids in hand: an IN list in the query cost
    # more to build than the row to read.
    team = Team.objects.select_related("department").get(slug=slug)
    if visible is not None and team.pk not in visible:
        raise Team.DoesNotExist(f"Team {slug!r} is not visible to this user.")
    return team


def team_role(*, user, team: Team) -> str | None:
    """The user's membership role in the team, or None."""
    if not user.is_authenticated:
        return None
    # All the user's roles at once (a handful), kept as team_ids_visible is; no ordering: the
    # default one joins teams and users.
    roles = principal_part(
        user,
        "roles",
        lambda: dict(Membership.objects.filter(user=user).order_by().values_list("team", "role")),
    )
    return roles.get(team.pk)


def user_is_team_lead(*, user, team: Team) -> bool:
    return team_role(user=user, team=team) == Membership.Role.LEAD


def user_manages_team(*, user, team: Team) -> bool:
    """True when the user manages the team's department."""
    return team.department.managers.filter(pk=user.pk).exists()


def user_roles(*, user) -> dict:
    """A summary of who the user is, for the home page, navigation and /api/v1/me."""
    memberships = list(
        Membership.objects.filter(user=user).select_related("team", "team__department")
    )
    return {
        "memberships": memberships,
        "is_lead": any(m.role == Membership.Role.LEAD for m in memberships),
        "is_manager": is_manager(user),
        "managed_departments": list(user.managed_departments.all()),
        "is_finance": is_finance(user),
        "is_platform_admin": is_platform_admin(user),
    }


def api_token_list(*, user) -> QuerySet[ApiToken]:
    """The user's own API tokens, newest first."""
    if not user.is_authenticated:
        return ApiToken.objects.none()
    return ApiToken.objects.filter(user=user)


def user_list(*, user):
    """Users visible to the caller: members of visible teams (everyone for finance/admins)."""
    qs = get_user_model().objects.order_by("username")
    if sees_everything(user):
        return qs
    return qs.filter(memberships__team__in=team_list(user=user)).distinct()


def team_hold_text(*, team: Team) -> str:
    """What a held team is told (job pages, the job form, the home page): that its queue is
    held, why, that nothing starts, and who can release it; "" when it is not held."""
    reason = team.queue_hold_reason
    if not reason:
        return ""
    managers = sorted(team.department.managers.values_list("username", flat=True))
    who = (", ".join(managers) + f" (managing {team.department.name}) or a platform admin"
           if managers else "a platform admin")  # fmt: skip
    text = (
        f"Your team's queue is held: {reason.rstrip('.')}. No job of the team starts until it "
        f"is released, and jobs submitted meanwhile wait. Who can release it: {who}."
    )
    if reason.startswith("Budget for"):
        text += " Finance can also raise the budget, which releases it."
    return text
