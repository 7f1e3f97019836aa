"""Web pages for people and tenancy: home, departments, teams, profile and API tokens."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.db.models import Count
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from core.forms import add_service_errors
from core.roles import is_platform_admin
from queues.forms.tenancy import ApiTokenForm
from queues.manifests.quotas import fair_share_weight_text
from queues.models import ApiToken, Team
from queues.selectors import tenancy as selectors
from queues.selectors.fair_share import (
    department_sharing,
    team_fair_share,
    team_member_fair_share,
)
from queues.selectors.home import home_summary
from queues.selectors.quotas import quota_usage
from queues.selectors.storage import team_guardrails
from queues.services import tenancy as services
from queues.services.fair_share import (
    department_fair_share_set,
    team_fair_share_set,
    team_member_fair_sharing_set,
)
from queues.services.holds import team_hold, team_hold_can_change, team_release
from queues.services.pod_security import team_pod_security, team_pod_security_set


@login_required
def home(request):
    """The landing page: by role, what needs the user now."""
    summary = home_summary(user=request.user, today=timezone.now().date())
    return render(request, "queues/home.html", summary)


@login_required
def team_list(request):
    teams = selectors.team_list(user=request.user).prefetch_related("memberships")
    return render(request, "queues/team_list.html", {"teams": teams})


@login_required
def department_list(request):
    """The departments the user sees, and how they share idle GPUs across the organisation;
    platform admins change it here."""
    departments = list(selectors.department_list(user=request.user).order_by("name"))
    counts = dict(
        Team.objects.filter(department__in=departments).order_by().values("department_id")
        .annotate(n=Count("id")).values_list("department_id", "n")
    )  # fmt: skip
    rows = department_sharing(departments=departments)
    for row in rows:
        row["teams"] = counts.get(row["department"].pk, 0)
    return render(
        request,
        "queues/department_list.html",
        {
            "rows": rows,
            "can_change": is_platform_admin(request.user),
            "sharing": sum(1 for r in rows if r["shares_with_organisation"]),
        },
    )


@login_required
@require_POST
def department_fair_share_change(request, slug):
    """Let a department share idle GPUs with the organisation, or stop, and weigh it: platform
    admins (the service says so to anyone else)."""
    department = selectors.department_list(user=request.user).filter(slug=slug).first()
    if department is None:
        raise Http404("No such department.")
    try:
        department = department_fair_share_set(
            actor=request.user, department=department,
            shares_with_organisation="shares" in request.POST,
            weight=request.POST.get("weight", ""),
        )  # fmt: skip
    except ValidationError as exc:
        messages.error(request, f"{department.name}: " + " ".join(exc.messages))
    else:
        weight = fair_share_weight_text(department.fair_share_weight)
        messages.success(
            request,
            f"{department.name} shares idle GPUs with the organisation (weight {weight}); the "
            "clusters get it shortly."
            if department.shares_with_organisation
            else f"{department.name}'s teams lend and borrow only among themselves; the clusters "
            "get it shortly.",
        )
    return redirect(f"{reverse('department-list')}#department-{department.slug}")


def _visible_team(request, slug) -> Team:
    """The team if the user may see it; a 404 otherwise (its existence is not told)."""
    try:
        return selectors.team_get(user=request.user, slug=slug)
    except Team.DoesNotExist as exc:
        raise Http404("No such team.") from exc


@login_required
def team_detail(request, slug):
    team = _visible_team(request, slug)
    memberships = selectors.membership_list(user=request.user).filter(team=team)
    can_hold = team_hold_can_change(user=request.user, team=team)
    return render(
        request,
        "queues/team_detail.html",
        {
            "team": team,
            "memberships": memberships,
            "my_role": selectors.team_role(user=request.user, team=team),
            "quotas": quota_usage(team=team),
            "can_hold": can_hold,
            "fair_share": team_fair_share(team=team, with_peers=can_hold),
            # Read only where there is something to show (or to turn on).
            "member_share": (
                team_member_fair_share(team=team) if team.member_fair_sharing or can_hold else None
            ),
            "guardrails": team_guardrails(team=team),
            "pod_security": team_pod_security(team=team),
            "can_exempt": is_platform_admin(request.user),
        },
    )


@login_required
@require_POST
def team_hold_change(request, slug):
    """Hold (with a reason) or release a team's queues: platform admins and its managers."""
    team = _visible_team(request, slug)
    try:
        if "release" in request.POST:
            team_release(actor=request.user, team=team)
            messages.success(request, f"{team.name}'s queues are released.")
        else:
            team_hold(actor=request.user, team=team, reason=request.POST.get("reason", ""))
            messages.success(request, f"{team.name}'s queues are held; running jobs finish.")
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    return redirect("team-detail", slug=team.slug)


@login_required
@require_POST
def team_pod_security_change(request, slug):
    """Exempt a team from the Pod Security defaults, with a reason, or end it: platform admins."""
    team = _visible_team(request, slug)
    try:
        team = team_pod_security_set(
            actor=request.user, team=team, exempt=bool(request.POST.get("exempt")),
            reason=request.POST.get("reason", ""),
        )  # fmt: skip
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        state = "exempt from" if team.pod_security_exempt else "under"
        messages.success(
            request,
            f"{team.name} is {state} the Pod Security defaults; the clusters get it shortly.",
        )
    return redirect(f"{reverse('team-detail', args=[team.slug])}#pod-security-h")


@login_required
@require_POST
def team_fair_share_change(request, slug):
    """Set a team's fair-sharing weight: platform admins and its department's managers."""
    team = _visible_team(request, slug)
    try:
        team = team_fair_share_set(
            actor=request.user, team=team, weight=request.POST.get("weight", "")
        )
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        messages.success(
            request,
            f"{team.name}'s fair-sharing weight is "
            f"{fair_share_weight_text(team.fair_share_weight)}; the clusters get it shortly.",
        )
    return redirect(f"{reverse('team-detail', args=[team.slug])}#fair-share-h")


@login_required
@require_POST
def team_member_fair_sharing_change(request, slug):
    """Share a team's queue fairly among its members, and weigh them: platform admins and its
    department's managers. A member's weight comes as `weight-<username>`."""
    team = _visible_team(request, slug)
    weights = {
        key.removeprefix("weight-"): value
        for key, value in request.POST.items()
        if key.startswith("weight-")
    }
    try:
        team = team_member_fair_sharing_set(
            actor=request.user, team=team, enabled="enabled" in request.POST, weights=weights
        )
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        messages.success(
            request,
            f"{team.name} shares its queue fairly among its members; the clusters get it shortly."
            if team.member_fair_sharing
            else f"{team.name}'s jobs wait in one queue by priority and age again.",
        )
    return redirect(f"{reverse('team-detail', args=[team.slug])}#member-share-h")


@login_required
def profile(request):
    """The user's profile and API tokens; a new token is shown once, right after creation."""
    form = ApiTokenForm(request.POST or None)
    new_token = None
    if request.method == "POST" and form.is_valid():
        try:
            token, new_token = services.api_token_create(
                user=request.user, name=form.cleaned_data["name"]
            )
        except ValidationError as exc:
            add_service_errors(form, exc)
        else:
            messages.success(
                request, f"Token “{token.name}” created. Copy it now: it is shown once."
            )
            form = ApiTokenForm()
    return render(
        request,
        "queues/profile.html",
        {
            "form": form,
            "new_token": new_token,
            "tokens": selectors.api_token_list(user=request.user),
            "roles": selectors.user_roles(user=request.user),
        },
    )


@login_required
@require_POST
def token_revoke(request, pk):
    try:
        token = services.api_token_revoke(user=request.user, token_id=pk)
    except ApiToken.DoesNotExist as exc:
        raise Http404("No such token.") from exc
    messages.success(request, f"Token “{token.name}” revoked.")
    return redirect("profile")
