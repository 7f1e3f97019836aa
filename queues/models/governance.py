"""Quota governance: priority tiers, quotas, quota requests, managed cluster objects, audit."""

from django.conf import settings
from django.db import models
from django.db.models import F, Q

from fleet.models import Cluster, NodePool
from fleet.validators import dns1123_label
from queues.models.tenancy import Department, Team


class PriorityTier(models.Model):
    """A priority tier: a Kueue WorkloadPriorityClass or a Volcano/Kubernetes PriorityClass."""

    name = models.CharField(max_length=63, unique=True, validators=[dns1123_label])
    value = models.IntegerField()
    preemptible = models.BooleanField(default=True)
    is_default = models.BooleanField(default=False)
    description = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-value"]
        constraints = [
            models.UniqueConstraint(
                fields=["is_default"], condition=Q(is_default=True), name="tier_one_default"
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


class ManagedObject(models.Model):
    """One Kubernetes object the portal owns: its desired manifest and what was applied."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="managed_objects")
    api_version = models.CharField(max_length=100)
    kind = models.CharField(max_length=100)
    namespace = models.CharField(max_length=63, blank=True)
    name = models.CharField(max_length=253)
    # What produced it, e.g. ("team", 3); used to find and prune objects per owner.
    owner_type = models.CharField(max_length=32)
    owner_id = models.BigIntegerField()
    desired = models.JSONField(default=dict)
    desired_hash = models.CharField(max_length=64, blank=True)
    desired_generation = models.PositiveIntegerField(default=1)
    applied_generation = models.PositiveIntegerField(default=0)
    applied_hash = models.CharField(max_length=64, blank=True)
    # The manifest last accepted by the cluster, for the diff of the next apply.
    applied_manifest = models.JSONField(null=True, blank=True)
    applied_at = models.DateTimeField(null=True, blank=True)
    # The live object's status as last read (ClusterQueue flavor usage), for pages.
    live_status = models.JSONField(null=True, blank=True)
    observed_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)
    # The desired generation the cluster refused permanently (422, 403 ...): not retried in a
    # loop, only after a while or when the desired manifest changes.
    failed_generation = models.PositiveIntegerField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    delete_requested = models.BooleanField(default=False)

    class Meta:
        ordering = ["cluster__name", "kind", "namespace", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "kind", "namespace", "name"], name="managedobject_unique"
            ),
        ]
        indexes = [models.Index(fields=["owner_type", "owner_id"], name="managedobject_owner")]

    def __str__(self):
        return f"{self.kind} {self.namespace + '/' if self.namespace else ''}{self.name}"


class AuditEvent(models.Model):
    """Who did what to which object, with before/after and the manifest diff where applied."""

    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="audit_events",
    )
    verb = models.CharField(max_length=64)
    object_type = models.CharField(max_length=64)
    object_id = models.CharField(max_length=64, blank=True)
    object_repr = models.CharField(max_length=255, blank=True)
    department = models.ForeignKey(
        Department, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    team = models.ForeignKey(
        Team, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    manifest_diff = models.TextField(blank=True)
    message = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self):
        return f"{self.created_at:%Y-%m-%d %H:%M} {self.actor} {self.verb} {self.object_repr}"
