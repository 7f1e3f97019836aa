"""People and tenancy: departments, teams, memberships, API tokens."""

from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q
from django.utils import timezone

from core.validators import http_url
from fleet.validators import DNS1123_LABEL_RE, dns1123_label

FAIR_SHARE_WEIGHT_MAX = 100
# Namespaces of the cluster itself, its schedulers and operators, and the portal's own: a team
# there could overwrite their Secrets (team leads write Secrets into their team's namespace).
# TEAM_NAMESPACES_RESERVED adds more.
SYSTEM_NAMESPACES = frozenset({
    "default", "kube-system", "kube-public", "kube-node-lease", "kueue-system",
    "volcano-system", "volcano-monitoring", "jobset-system", "kubeflow", "gpu-operator",
    "nvidia-gpu-operator", "cert-manager", "quartermaster",
})  # fmt: skip
SYSTEM_NAMESPACE_PREFIXES = ("kube-",)


def namespace_reserved(namespace: str) -> bool:
    """Whether a namespace belongs to the cluster, a scheduler or the portal, not to a team."""
    return (
        namespace in SYSTEM_NAMESPACES
        or namespace.startswith(SYSTEM_NAMESPACE_PREFIXES)
        or namespace in settings.TEAM_NAMESPACES_RESERVED
    )


class Department(models.Model):
    """A group of teams with one or more managers; a Kueue Cohort or a parent Volcano Queue."""

    slug = models.CharField(max_length=63, unique=True, validators=[dns1123_label])
    name = models.CharField(max_length=200)
    managers = models.ManyToManyField(
        settings.AUTH_USER_MODEL, related_name="managed_departments", blank=True
    )
    # Sharing across the organisation (Kueue): the department's Cohort gets the organisation's
    # Cohort as its parent, so its teams lend their idle GPUs to, and borrow from, the teams of
    # every other department that shares; between departments, fair sharing weighs each
    # department's Cohort by this weight (spec.fairSharing.weight).
    shares_with_organisation = models.BooleanField(default=False)
    fair_share_weight = models.DecimalField(max_digits=6, decimal_places=3, default=Decimal(1))
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(slug__regex=DNS1123_LABEL_RE),
                name="department_slug_dns1123",
            ),
            models.CheckConstraint(
                condition=Q(fair_share_weight__gte=0, fair_share_weight__lte=FAIR_SHARE_WEIGHT_MAX),
                name="department_fair_share_weight_range",
            ),
        ]

    def __str__(self):
        return self.name


class Team(models.Model):
    """A team that owns quota and jobs; a namespace plus a ClusterQueue/LocalQueue."""

    slug = models.CharField(max_length=63, unique=True, validators=[dns1123_label])
    name = models.CharField(max_length=200)
    namespace = models.CharField(max_length=63, unique=True, validators=[dns1123_label])
    cost_centre = models.CharField(max_length=64, blank=True)
    department = models.ForeignKey(Department, on_delete=models.PROTECT, related_name="teams")
    # Optional Slack-compatible webhook for job notifications.
    webhook_url = models.URLField(blank=True, validators=[http_url])
    # Set while the team's queue is held (e.g. its budget is spent); rendered as stopPolicy Hold.
    queue_hold_reason = models.CharField(max_length=300, blank=True)
    # Kueue fair sharing: the ClusterQueue's spec.fairSharing.weight. Idle GPUs of the cohort go
    # first to the team whose borrowing is smallest relative to its weight; 0 borrows last.
    fair_share_weight = models.DecimalField(max_digits=6, decimal_places=3, default=Decimal(1))
    # Kueue's admission fair sharing among the team's members: each member submits to a
    # LocalQueue of their own, and the team's ClusterQueue serves the one that used least first.
    member_fair_sharing = models.BooleanField(default=False)
    # Pod Security: the team's namespace enforces the baseline standard and its jobs' pods run
    # with the restrictive defaults (queues.manifests), unless a platform admin exempts the
    # team, with a reason (audited): then nothing is enforced and the defaults are left out.
    pod_security_exempt = models.BooleanField(default=False)
    pod_security_exempt_reason = models.TextField(blank=True)
    members = models.ManyToManyField(
        settings.AUTH_USER_MODEL, through="Membership", related_name="teams"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(slug__regex=DNS1123_LABEL_RE),
                name="team_slug_dns1123",
            ),
            models.CheckConstraint(
                condition=Q(namespace__regex=DNS1123_LABEL_RE),
                name="team_namespace_dns1123",
            ),
            models.CheckConstraint(
                condition=Q(fair_share_weight__gte=0, fair_share_weight__lte=FAIR_SHARE_WEIGHT_MAX),
                name="team_fair_share_weight_range",
            ),
        ]

    def __str__(self):
        return self.name

    def clean(self):
        super().clean()
        if self.namespace and namespace_reserved(self.namespace):
            raise ValidationError({"namespace": (
                f"{self.namespace} is reserved for the cluster's own components, its schedulers "
                f"or the portal; give the team a namespace of its own, e.g. team-{self.slug}."
            )})  # fmt: skip


class Membership(models.Model):
    """A user's role in a team."""

    class Role(models.TextChoices):
        MEMBER = "member", "Member"
        LEAD = "lead", "Team lead"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)
    # The member's LocalQueue's spec.fairSharing.weight under member fair sharing: their use
    # counts divided by it.
    fair_share_weight = models.DecimalField(max_digits=6, decimal_places=3, default=Decimal(1))
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["team__name", "user__username"]
        constraints = [
            models.UniqueConstraint(fields=["user", "team"], name="membership_unique_user_team"),
            models.CheckConstraint(
                condition=Q(role__in=["member", "lead"]), name="membership_role_valid"
            ),
            models.CheckConstraint(
                condition=Q(fair_share_weight__gte=0, fair_share_weight__lte=FAIR_SHARE_WEIGHT_MAX),
                name="membership_fair_share_weight_range",
            ),
        ]

    def __str__(self):
        return f"{self.user} in {self.team} ({self.role})"


class ApiToken(models.Model):
    """A named token a user creates for scripts; only its SHA-256 digest is stored."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=12, db_index=True)
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # None: never expires (tokens made before expiry existed, or API_TOKEN_DAYS=0).
    expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self):
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_expired(self):
        return self.expires_at is not None and self.expires_at <= timezone.now()

    @property
    def is_active(self):
        return self.revoked_at is None and not self.is_expired
