"""The borrowing and lending ledger: GPU-seconds each team borrowed from its cohort and lent to
it, per hour and pool, and the rate finance charges borrowers and credits lenders."""

from django.conf import settings
from django.db import models
from django.db.models import Q

from fleet.models import Cluster, NodePool
from queues.models import Team


class LedgerHour(models.Model):
    """One team × pool × hour: GPU-seconds borrowed beyond its nominal quota, and lent to others.

    Sampled from the admitted workloads (billing.services.ledger); each sample credits the
    seconds since the previous one, so a row's figures are GPU-seconds, not GPU counts.
    """

    hour = models.DateTimeField()  # start of the hour, UTC
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    pool = models.ForeignKey(NodePool, on_delete=models.CASCADE, related_name="+")
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="ledger_hours")
    borrowed_seconds = models.BigIntegerField(default=0)
    lent_seconds = models.BigIntegerField(default=0)
    samples = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["hour", "team_id", "pool_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["hour", "cluster", "pool", "team"], name="ledgerhour_unique"
            ),
            models.CheckConstraint(
                condition=Q(borrowed_seconds__gte=0) & Q(lent_seconds__gte=0),
                name="ledgerhour_non_negative",
            ),
        ]
        indexes = [models.Index(fields=["team", "hour"], name="ledgerhour_team_hour")]

    def __str__(self):
        return f"{self.hour:%Y-%m-%d %H:00} {self.team_id} +{self.borrowed_seconds}s"


class LedgerState(models.Model):
    """When a cluster's workloads were last sampled for the ledger, and the last failure."""

    cluster = models.OneToOneField(Cluster, on_delete=models.CASCADE, related_name="+")
    last_sample_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)

    def __str__(self):
        return f"{self.cluster_id} @ {self.last_sample_at}"


class LedgerRate(models.Model):
    """What a borrowed GPU-hour costs its borrower and earns its lender, from a moment on.

    An hour of the ledger is priced at the rate in force at its start; zero turns it off.
    """

    rate_per_gpu_hour = models.DecimalField(max_digits=12, decimal_places=4)
    currency = models.CharField(max_length=3, default="EUR")
    effective_from = models.DateTimeField()
    note = models.CharField(max_length=200, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-effective_from"]
        constraints = [
            models.CheckConstraint(
                condition=Q(rate_per_gpu_hour__gte=0), name="ledgerrate_non_negative"
            ),
            models.UniqueConstraint(fields=["effective_from"], name="ledgerrate_unique_from"),
        ]

    def __str__(self):
        return f"{self.rate_per_gpu_hour} {self.currency}/GPU-h from {self.effective_from:%Y-%m-%d}"
