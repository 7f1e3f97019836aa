"""Writes for people and tenancy: teams, departments, memberships and API tokens."""

import hashlib
import secrets
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from core.roles import is_platform_admin
from queues.models import ApiToken, Department, Job, Membership, QuotaRequest, Team
from queues.selectors.tenancy import user_is_team_lead
from queues.services.audit import audit
from queues.services.reconcile import reconcile_all_enqueue

TOKEN_PREFIX = "qm_"
# A team with jobs in these states cannot be removed.
ACTIVE_JOB_STATES = ("submitted", "queued", "admitted", "running")


def _digest(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def _active_tokens(user):
    now = timezone.now()
    return ApiToken.objects.filter(user=user, revoked_at__isnull=True).filter(
        Q(expires_at__isnull=True) | Q(expires_at__gt=now)
    )


def api_token_create(*, user, name: str) -> tuple[ApiToken, str]:
    """Create a named API token that expires after API_TOKEN_DAYS; returns the row and the raw
    token, which is shown only once. A user holds at most API_TOKENS_PER_USER active tokens."""
    name = (name or "").strip()
    if not name:
        raise ValidationError({"name": "Give the token a name, e.g. 'training scripts'."})
    if len(name) > 100:
        raise ValidationError({"name": "Use at most 100 characters."})
    if "\x00" in name:
        raise ValidationError({"name": "A name may not contain NUL characters."})
    with transaction.atomic():
        # The user's row serialises creations, so two requests cannot both pass the cap.
        get_user_model().objects.select_for_update().filter(pk=user.pk).first()
        cap = settings.API_TOKENS_PER_USER
        if _active_tokens(user).count() >= cap:
            raise ValidationError(
                {
                    "name": f"You already have {cap} active tokens, the most a user may hold. "
                    "Revoke one you no longer use (on your profile page or DELETE "
                    "/api/v1/tokens/{id}/) first."
                }
            )
        days = settings.API_TOKEN_DAYS
        expires = timezone.now() + timedelta(days=days) if days > 0 else None
        raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
        token = ApiToken.objects.create(
            user=user, name=name, prefix=raw[:10], digest=_digest(raw), expires_at=expires
        )
        audit(actor=user, verb="api_token.create", obj=token,
              after={"name": name, "prefix": token.prefix,
                     "expires_at": expires.isoformat() if expires else None},
              message=f"API token {name!r} ({token.prefix}…) created.")  # fmt: skip
    return token, raw


def api_token_revoke(*, user, token_id: int) -> ApiToken:
    """Revoke one of the user's tokens; revoking twice is a no-op."""
    with transaction.atomic():
        token = ApiToken.objects.select_for_update().get(pk=token_id, user=user)
        if token.revoked_at is None:
            token.revoked_at = timezone.now()
            token.save(update_fields=["revoked_at"])
            audit(actor=user, verb="api_token.revoke", obj=token,
                  message=f"API token {token.name!r} ({token.prefix}…) revoked.")  # fmt: skip
    return token


def api_token_authenticate(*, raw: str) -> ApiToken | None:
    """The token matching the raw string (revoked or expired ones too: the caller says which),
    with its user; records when an active one was used."""
    # The digest is unique: a slice without ordering is all the lookup needs.
    found = (
        ApiToken.objects.select_related("user")
        .filter(digest=_digest(raw), revoked_at__isnull=True, user__is_active=True)
        .order_by()[:1]
    )
    token = next(iter(found), None)
    if token is not None and not token.is_expired:
        now = timezone.now()
        # Only write when stale, so a busy script does not write on every request.
        if token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60:
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
            token.last_used_at = now
    return token


def _require_admin(actor):
    if not is_platform_admin(actor):
        raise PermissionDenied("Only platform admins can do this.")


def department_create(*, actor, slug: str, name: str, managers=()) -> Department:
    """Create a department (platform admins only)."""
    _require_admin(actor)
    department = Department(slug=slug, name=name)
    department.full_clean()
    with transaction.atomic():
        department.save()
        department.managers.set(managers)
        audit(actor=actor, verb="department.create", obj=department, department=department,
              after=_department_fields(department))  # fmt: skip
    reconcile_all_enqueue()
    return department


def _department_fields(department: Department) -> dict:
    return {"slug": department.slug, "name": department.name,
            "managers": sorted(department.managers.values_list("username", flat=True))}  # fmt: skip


DEPARTMENT_FIELDS = ("slug", "name", "managers")


def department_update(*, actor, department: Department, **changes) -> Department:
    """Change a department's slug, name or managers (platform admins); audited, and its cluster
    objects follow."""
    _require_admin(actor)
    unknown = set(changes) - set(DEPARTMENT_FIELDS)
    if unknown:
        raise ValidationError(f"Unknown department fields: {', '.join(sorted(unknown))}.")
    before = _department_fields(department)
    for name in ("slug", "name"):
        if name in changes:
            setattr(department, name, changes[name])
    department.full_clean()
    with transaction.atomic():
        department.save()
        if "managers" in changes:
            department.managers.set(changes["managers"])
        after = _department_fields(department)
        if after != before:
            keys = [k for k in after if after[k] != before[k]]
            audit(
                actor=actor, verb="department.update", obj=department, department=department,
                before={k: before[k] for k in keys}, after={k: after[k] for k in keys},
            )  # fmt: skip
    reconcile_all_enqueue()
    return department


def team_create(
    *, actor, slug: str, name: str, department: Department, namespace: str = "", cost_centre=""
) -> Team:
    """Create a team (platform admins only); the namespace defaults to the slug."""
    _require_admin(actor)
    team = Team(
        slug=slug,
        name=name,
        namespace=namespace or slug,
        cost_centre=cost_centre,
        department=department,
    )
    team.full_clean()
    with transaction.atomic():
        team.save()
        audit(actor=actor, verb="team.create", obj=team, team=team,
              after={name: str(getattr(team, name)) for name in TEAM_FIELDS})  # fmt: skip
    # Its namespace, ClusterQueue and LocalQueue appear without waiting for the periodic pass.
    reconcile_all_enqueue()
    return team


TEAM_FIELDS = ("slug", "name", "namespace", "cost_centre", "department")


def team_update(*, actor, team: Team, **changes) -> Team:
    """Change a team's slug, name, namespace, cost centre or department (platform admins),
    checked as a new team is (a namespace another team or the cluster itself uses is refused);
    audited, and its cluster objects follow."""
    _require_admin(actor)
    unknown = set(changes) - set(TEAM_FIELDS)
    if unknown:
        raise ValidationError(f"Unknown team fields: {', '.join(sorted(unknown))}.")
    before = {name: str(getattr(team, name)) for name in changes}
    for name, value in changes.items():
        setattr(team, name, value)
    team.full_clean()
    with transaction.atomic():
        team.save()
        after = {name: str(getattr(team, name)) for name in changes}
        if after != before:
            audit(actor=actor, verb="team.update", obj=team, team=team, before=before,
                  after=after)  # fmt: skip
    reconcile_all_enqueue()
    return team


def _require_lead_or_admin(actor, team: Team):
    if not (is_platform_admin(actor) or user_is_team_lead(user=actor, team=team)):
        raise PermissionDenied("Only the team's leads and platform admins can change members.")


def membership_set(
    *, actor, team: Team, role: str, user=None, username: str | None = None
) -> Membership:
    """Add a user (or the user named `username`) to a team or change their role (team leads and
    admins). Who may is checked first, so nobody else learns whether a username exists."""
    _require_lead_or_admin(actor, team)
    if role not in Membership.Role.values:
        raise ValidationError({"role": f"Choose one of: {', '.join(Membership.Role.values)}."})
    if user is None:
        user = get_user_model().objects.filter(username=username, is_active=True).first()
        if user is None:
            raise ValidationError({"user": f"No active user is called {str(username)[:150]!r}."})
    with transaction.atomic():
        was = Membership.objects.select_for_update().filter(user=user, team=team).first()
        membership, _ = Membership.objects.update_or_create(
            user=user, team=team, defaults={"role": role}
        )
        if was is None or was.role != role:
            audit(actor=actor, verb="membership.create" if was is None else "membership.update",
                  obj=membership, team=team,
                  before=None if was is None else {"user": user.username, "role": was.role},
                  after={"user": user.username, "role": role},
                  message=f"{user.username} is a {role} of {team.name}.")  # fmt: skip
    return membership


def membership_delete(*, actor, membership: Membership) -> None:
    """Remove a user from a team (team leads and admins); a team keeps at least one lead."""
    _require_lead_or_admin(actor, membership.team)
    with transaction.atomic():
        leads = Membership.objects.select_for_update().filter(
            team=membership.team, role=Membership.Role.LEAD
        )
        if membership.role == Membership.Role.LEAD and leads.count() <= 1:
            raise ValidationError("A team needs at least one lead: appoint another lead first.")
        audit(actor=actor, verb="membership.delete", obj=membership, team=membership.team,
              before={"user": membership.user.username, "role": membership.role},
              message=f"{membership.user.username} left {membership.team.name}.")  # fmt: skip
        membership.delete()


def team_delete(*, actor, team: Team) -> None:
    """Remove a team: refused while it has jobs in flight; its cluster objects are pruned."""
    if not is_platform_admin(actor):
        raise PermissionDenied("Only platform admins can remove teams.")
    with transaction.atomic():
        team = Team.objects.select_for_update().get(pk=team.pk)
        active = Job.objects.filter(team=team, state__in=ACTIVE_JOB_STATES).count()
        if active:
            raise ValidationError(
                f"{team.name} still has {active} job(s) submitted, queued or running. "
                "Cancel them or wait for them to finish, then remove the team."
            )
        if QuotaRequest.objects.filter(team=team).exists() or team.jobs.exists():
            # History (requests, jobs, billing) refers to the team: keep the row, drop access.
            raise ValidationError(
                f"{team.name} has job or quota history that billing refers to; "
                "remove its quota instead, the history stays."
            )
        audit(actor=actor, verb="team.delete", obj=team, team=None, department=team.department)
        team.quotas.all().delete()
        team.delete()
        reconcile_all_enqueue()
