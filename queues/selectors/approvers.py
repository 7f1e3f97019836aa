"""Who may decide a request: four eyes, always. A held job is decided by a lead of its team, a
quota request by a manager of the team's department; nobody decides their own request, so when
the requester is the only one at that level the decision goes up a level (team leads, then
department managers, then platform admins)."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.contrib.auth import get_user_model
from django.db.models import Exists, OuterRef, Q

from core.roles import GROUP_PLATFORM_ADMINS, is_platform_admin
from queues.models import Department, Job, Membership, QuotaRequest, Team


@dataclass
class Approvers:
    """The people who may decide one request, and how to say who they are."""

    who: str  # e.g. "a lead of Vision"
    users: list = field(default_factory=list)
    requester_id: int | None = None

    def includes(self, user) -> bool:
        return user is not None and user.is_authenticated and user.pk in {u.pk for u in self.users}

    def describe(self) -> str:
        names = ", ".join(u.get_username() for u in self.users[:5])
        return f"{self.who} ({names})" if names else f"{self.who} (nobody yet)"

    def refusal(self, user) -> str:
        """The reason a user may not decide, for a 403 and the page."""
        if user is not None and user.pk == self.requester_id:
            return "Nobody decides their own request: it goes to " + self.describe() + "."
        return "Only " + self.describe() + " can decide this request."


def _leads(team: Team):
    return get_user_model().objects.filter(
        memberships__team=team, memberships__role=Membership.Role.LEAD, is_active=True
    )


def _managers(team: Team):
    return get_user_model().objects.filter(managed_departments=team.department_id, is_active=True)


def _platform_admins():
    return get_user_model().objects.filter(
        Q(is_superuser=True) | Q(groups__name=GROUP_PLATFORM_ADMINS), is_active=True
    )


def _first_level(levels, requester_id) -> Approvers:
    """The first level with someone on it who is not the requester."""
    for who, users in levels:
        others = [u for u in users.distinct().order_by("username") if u.pk != requester_id]
        if others:
            return Approvers(who=who, users=others, requester_id=requester_id)
    return Approvers(who=levels[-1][0], requester_id=requester_id)


def job_approvers(*, job: Job) -> Approvers:
    """Who may approve or reject a job the approval policy holds back."""
    team = job.team
    return _first_level(
        [
            (f"a lead of {team.name}", _leads(team)),
            (f"a manager of {team.department.name}", _managers(team)),
            ("a platform admin", _platform_admins()),
        ],
        job.owner_id,
    )


def quota_request_approvers(*, quota_request: QuotaRequest) -> Approvers:
    """Who may approve, trim or reject a quota request."""
    team = quota_request.team
    return _first_level(
        [
            (f"a manager of {team.department.name}", _managers(team)),
            ("a platform admin", _platform_admins()),
        ],
        quota_request.requested_by_id,
    )


# -- what waits for a user's decision (the same rules, in SQL, for lists and counts) ----------


def _active_leads():
    return Membership.objects.filter(
        team_id=OuterRef("team_id"), role=Membership.Role.LEAD, user__is_active=True
    )


def _active_managers():
    return Department.managers.through.objects.filter(
        department_id=OuterRef("team__department_id"), user__is_active=True
    )


def jobs_awaiting_decision(*, user):
    """Held jobs this user may approve or reject (job_approvers, as a query)."""
    if not user.is_authenticated:
        return Job.objects.none()
    leads, managers = _active_leads(), _active_managers()
    no_other_lead = ~Exists(leads.exclude(user_id=OuterRef("owner_id")))
    decides = Exists(leads.filter(user_id=user.pk)) | (
        Exists(managers.filter(user_id=user.pk)) & no_other_lead
    )
    if is_platform_admin(user):
        decides |= no_other_lead & ~Exists(managers.exclude(user_id=OuterRef("owner_id")))
    return (
        Job.objects.filter(decides, state=Job.State.PENDING_APPROVAL)
        .exclude(owner=user)
        .select_related("team", "owner", "pool", "tier")
        .order_by("created_at")
    )


def department_decides(*, user):
    """quota_request_approvers as a filter on rows with a team and a requester (quota requests,
    reservations): a manager of the team's department decides; a platform admin where no
    manager but the requester is."""
    managers = _active_managers()
    decides = Exists(managers.filter(user_id=user.pk))
    if is_platform_admin(user):
        decides |= ~Exists(managers.exclude(user_id=OuterRef("requested_by_id")))
    return decides


def quota_requests_awaiting_decision(*, user):
    """Pending quota requests this user may decide (quota_request_approvers, as a query)."""
    if not user.is_authenticated:
        return QuotaRequest.objects.none()
    return (
        QuotaRequest.objects.filter(department_decides(user=user), state=QuotaRequest.State.PENDING)
        .exclude(requested_by=user)
        .select_related(
            "team__department", "pool__gpu_model", "pool__cluster", "requested_by", "decided_by"
        )
        .order_by("created_at")
    )
