"""Month close: a month's report, frozen as a snapshot once closed."""

from django.conf import settings
from django.db import models
from django.db.models import Q


class MonthlyReport(models.Model):
    """A month's report; closing it freezes a snapshot priced with a recorded price-book version."""

    class State(models.TextChoices):
        OPEN = "open", "Open"
        CLOSED = "closed", "Closed"

    month = models.DateField(unique=True)  # first day of the month
    state = models.CharField(max_length=16, choices=State.choices, default=State.OPEN)
    snapshot = models.JSONField(null=True, blank=True)
    price_book_version = models.CharField(max_length=64, blank=True)
    closed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    closed_at = models.DateTimeField(null=True, blank=True)
    reopened_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    reopened_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-month"]
        constraints = [
            models.CheckConstraint(
                condition=Q(state="open")
                | (Q(snapshot__isnull=False) & Q(closed_at__isnull=False)),
                name="monthlyreport_closed_has_snapshot",
            ),
        ]

    def __str__(self):
        return f"{self.month:%Y-%m} ({self.state})"
