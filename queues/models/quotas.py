"""Quotas: priority tiers, quotas per team and pool, and the requests that change them."""

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import F, Q

from fleet.models import NodePool
from fleet.validators import dns1123_label
from queues.models.tenancy import Team

PROTECTION_MAX_MINUTES = 1440  # a day: longer would let one job hold lent GPUs indefinitely


class PriorityTier(models.Model):
    """A priority tier: a Kueue WorkloadPriorityClass or a Volcano/Kubernetes PriorityClass."""

    name = models.CharField(max_length=63, unique=True, validators=[dns1123_label])
    value = models.IntegerField()
    preemptible = models.BooleanField(default=True)
    is_default = models.BooleanField(default=False)
    description = models.CharField(max_length=200, blank=True)

    # Idle-GPU policy of the tier's running jobs: GPUs below the threshold (mean utilisation,
    # percent) for idle_after_minutes are idle; the owner and the lead are told; after
    # idle_grace_minutes more, the action applies (warn again only, or suspend the job).
    class IdleAction(models.TextChoices):
        WARN = "warn", "Warn only"
        SUSPEND = "suspend", "Suspend the job"

    idle_threshold_percent = models.PositiveSmallIntegerField(
        default=5, validators=[MinValueValidator(0), MaxValueValidator(100)]
    )
    idle_after_minutes = models.PositiveIntegerField(
        default=30, validators=[MinValueValidator(1), MaxValueValidator(10080)]
    )
    idle_grace_minutes = models.PositiveIntegerField(
        default=30, validators=[MinValueValidator(0), MaxValueValidator(10080)]
    )
    idle_action = models.CharField(
        max_length=16, choices=IdleAction.choices, default=IdleAction.WARN
    )
    # Guaranteed runtime before a running job of the tier may be reclaimed across teams
    # (queues.services.protection); 0: none.
    protection_minutes = models.PositiveIntegerField(
        default=0, validators=[MaxValueValidator(PROTECTION_MAX_MINUTES)]
    )

    class Meta:
        ordering = ["-value"]
        constraints = [
            models.UniqueConstraint(
                fields=["is_default"], condition=Q(is_default=True), name="tier_one_default"
            ),
            models.CheckConstraint(
                condition=Q(idle_threshold_percent__lte=100), name="tier_idle_threshold_percent"
            ),
            models.CheckConstraint(
                condition=Q(protection_minutes__lte=PROTECTION_MAX_MINUTES),
                name="tier_protection_minutes_max",
            ),
        ]

    def __str__(self):
        return self.name


class Quota(models.Model):
    """A team's GPU quota in a pool: nominal, borrowing and lending limits (None = no limit)."""

    # Whether the quota lets its team run jobs in the pool at all: GPUs of its own, or room to
    # borrow. A row of zeros grants nothing. grants_gpus() is the same rule for a row in hand.
    GRANTS_GPUS = Q(nominal_gpus__gt=0) | Q(borrowing_limit__isnull=True) | Q(borrowing_limit__gt=0)

    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="quotas")
    pool = models.ForeignKey(NodePool, on_delete=models.PROTECT, related_name="quotas")
    nominal_gpus = models.PositiveIntegerField(default=0)
    borrowing_limit = models.PositiveIntegerField(null=True, blank=True)
    lending_limit = models.PositiveIntegerField(null=True, blank=True)
    # A burst grant: until ends_at the values above apply; then the base_* values come back.
    ends_at = models.DateTimeField(null=True, blank=True)
    base_nominal_gpus = models.PositiveIntegerField(null=True, blank=True)
    base_borrowing_limit = models.PositiveIntegerField(null=True, blank=True)
    base_lending_limit = models.PositiveIntegerField(null=True, blank=True)
    # The team had no quota in the pool before the burst: when it ends, the row goes.
    base_absent = models.BooleanField(default=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["team__name", "pool__name"]
        constraints = [
            models.UniqueConstraint(fields=["team", "pool"], name="quota_unique_team_pool"),
            models.CheckConstraint(
                condition=Q(lending_limit__isnull=True) | Q(lending_limit__lte=F("nominal_gpus")),
                name="quota_lending_within_nominal",
            ),
        ]

    def __str__(self):
        return f"{self.team} · {self.pool}: {self.nominal_gpus} GPUs"

    def grants_gpus(self) -> bool:
        return self.nominal_gpus > 0 or self.borrowing_limit is None or self.borrowing_limit > 0


class QuotaRequest(models.Model):
    """A team's request for quota in a pool, and the manager's decision on it."""

    class State(models.TextChoices):
        PENDING = "pending", "Pending"
        APPROVED = "approved", "Approved"
        REJECTED = "rejected", "Rejected"
        APPLIED = "applied", "Applied"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"

    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="quota_requests")
    pool = models.ForeignKey(NodePool, on_delete=models.PROTECT, related_name="quota_requests")
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="quota_requests"
    )
    nominal_gpus = models.PositiveIntegerField()
    borrowing_limit = models.PositiveIntegerField(null=True, blank=True)
    lending_limit = models.PositiveIntegerField(null=True, blank=True)
    # Whether the request names each limit (None above then meaning "no limit"); a limit it
    # leaves out keeps the team's value when the request is granted.
    sets_borrowing_limit = models.BooleanField(default=True)
    sets_lending_limit = models.BooleanField(default=True)
    ends_at = models.DateTimeField(null=True, blank=True)
    justification = models.TextField()
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    # What was granted (a manager may trim the numbers).
    granted_nominal_gpus = models.PositiveIntegerField(null=True, blank=True)
    granted_borrowing_limit = models.PositiveIntegerField(null=True, blank=True)
    granted_lending_limit = models.PositiveIntegerField(null=True, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="quota_decisions",
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_reason = models.TextField(blank=True)
    apply_error = models.TextField(blank=True)
    applied_at = models.DateTimeField(null=True, blank=True)
    # The generation of the team's queue object that carries this decision; the request turns
    # applied when the cluster has accepted that generation (or a later one).
    awaiting_generation = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(
                    state__in=["pending", "approved", "rejected", "applied", "failed", "cancelled"]
                ),
                name="quotarequest_state_valid",
            ),
        ]

    def __str__(self):
        return f"{self.team} asks {self.nominal_gpus} GPUs in {self.pool} ({self.state})"
