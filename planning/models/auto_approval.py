"""The admins' rule for approving quota increases on evidence. Its table keeps the name it had in
queues (no data moved)."""

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models


class QuotaAutoApproval(models.Model):
    """Admins' rule for approving quota increases on evidence (one row; off by default).

    An increase is approved at once, audited with the figures that decided it, when the team's
    measured use of its current quota in the pool (the p90 of its hourly GPUs held over the
    lookback) reaches min_usage_percent, the increase stays within both limits, and the pool
    has that much capacity left beside the other teams' quota. Anything else waits for a person.
    """

    enabled = models.BooleanField(default=False)
    min_usage_percent = models.PositiveSmallIntegerField(
        default=90, validators=[MinValueValidator(1), MaxValueValidator(100)]
    )
    max_increase_gpus = models.PositiveIntegerField(
        default=4, validators=[MinValueValidator(1), MaxValueValidator(10000)]
    )
    max_increase_percent = models.PositiveIntegerField(
        default=50, validators=[MinValueValidator(1), MaxValueValidator(1000)]
    )
    lookback_days = models.PositiveSmallIntegerField(
        default=30, validators=[MinValueValidator(1), MaxValueValidator(365)]
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "queues_quotaautoapproval"
        verbose_name = "quota auto-approval rule"

    def __str__(self):
        return "Quota auto-approval " + ("on" if self.enabled else "off")
