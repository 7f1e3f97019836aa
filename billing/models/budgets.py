"""How teams are charged and limited: billing basis per team, monthly budgets."""

from django.conf import settings
from django.db import models
from django.db.models import Q

from queues.models import Team


class TeamBillingPolicy(models.Model):
    """How a team is charged: allocated GPU-hours (default), used GPU-hours, or a blend."""

    class Basis(models.TextChoices):
        ALLOCATED = "allocated", "Allocated"
        USED = "used", "Used"
        BLEND = "blend", "Blend"

    team = models.OneToOneField(Team, on_delete=models.CASCADE, related_name="billing_policy")
    basis = models.CharField(max_length=16, choices=Basis.choices, default=Basis.ALLOCATED)
    # Share of the allocated figure in a blend: cost = w × allocated + (1 − w) × used.
    blend_weight = models.DecimalField(max_digits=4, decimal_places=3, default="0.500")

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(blend_weight__gte=0) & Q(blend_weight__lte=1),
                name="teambillingpolicy_weight_0_1",
            ),
        ]

    def __str__(self):
        return f"{self.team}: {self.basis}"


class Budget(models.Model):
    """A team's spending limit for a month, in currency or GPU-hours, with alert thresholds."""

    class Kind(models.TextChoices):
        CURRENCY = "currency", "Currency"
        GPU_HOURS = "gpu_hours", "GPU-hours"

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="budgets")
    month = models.DateField()  # first day of the month
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.CURRENCY)
    amount = models.DecimalField(max_digits=14, decimal_places=2)
    currency = models.CharField(max_length=3, default="EUR")
    thresholds = models.JSONField(default=list)  # percentages, e.g. [50, 80, 100]
    enforce = models.BooleanField(default=False)
    alerts_sent = models.JSONField(default=list, blank=True)  # thresholds already alerted
    held = models.BooleanField(default=False)  # this budget put the team's queue on hold
    last_spent = models.DecimalField(max_digits=14, decimal_places=2, default=0)
    last_checked_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-month", "team__name"]
        constraints = [
            models.UniqueConstraint(fields=["team", "month"], name="budget_unique_team_month"),
            models.CheckConstraint(condition=Q(amount__gte=0), name="budget_amount_non_negative"),
        ]

    def __str__(self):
        return f"{self.team} {self.month:%Y-%m}: {self.amount} {self.unit}"

    @property
    def unit(self) -> str:
        return "GPU-h" if self.kind == self.Kind.GPU_HOURS else self.currency
