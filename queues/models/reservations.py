"""Advance reservations: GPUs of a pool booked by a team for a time window, and the site's lead
time (how long before a window the portal starts freeing its capacity)."""

from django.conf import settings
from django.core.validators import MaxValueValidator
from django.db import models
from django.db.models import F, Q

from fleet.models import NodePool
from queues.models.tenancy import Team

DEFAULT_LEAD_MINUTES = 60


class Reservation(models.Model):
    """N GPUs of a pool for a team in [starts_at, ends_at), decided by a manager (four eyes)."""

    class State(models.TextChoices):
        PENDING = "pending", "Pending"
        APPROVED = "approved", "Approved"
        # Within the lead time before the window: the team's GPUs stop being lent.
        HOLDING = "holding", "Freeing capacity"
        ACTIVE = "active", "Active"
        ENDED = "ended", "Ended"
        REJECTED = "rejected", "Rejected"
        CANCELLED = "cancelled", "Cancelled"

    # The states whose GPUs count against the pool's capacity (and are rendered when in force).
    BOOKED_STATES = (State.APPROVED, State.HOLDING, State.ACTIVE)

    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="reservations")
    pool = models.ForeignKey(NodePool, on_delete=models.PROTECT, related_name="reservations")
    gpus = models.PositiveIntegerField()
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    reason = models.TextField()
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="reservations"
    )
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="reservation_decisions",
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_reason = models.TextField(blank=True)
    # When the beat moved it on (the lead time began, the window opened, it ended).
    holding_since = models.DateTimeField(null=True, blank=True)
    activated_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["starts_at", "pk"]
        constraints = [
            models.CheckConstraint(
                condition=Q(ends_at__gt=F("starts_at")), name="reservation_ends_after_start"
            ),
            models.CheckConstraint(condition=Q(gpus__gt=0), name="reservation_gpus_positive"),
            models.CheckConstraint(
                condition=Q(
                    state__in=[
                        "pending",
                        "approved",
                        "holding",
                        "active",
                        "ended",
                        "rejected",
                        "cancelled",
                    ]
                ),
                name="reservation_state_valid",
            ),  # fmt: skip
        ]
        indexes = [
            models.Index(fields=["state", "starts_at"], name="reservation_state_start"),
            models.Index(fields=["pool", "ends_at"], name="reservation_pool_end"),
        ]

    def __str__(self):
        return (
            f"{self.team} reserves {self.gpus} GPUs of {self.pool} "
            f"{self.starts_at:%Y-%m-%d %H:%M}–{self.ends_at:%Y-%m-%d %H:%M} UTC ({self.state})"
        )

    @property
    def gpu_seconds(self) -> int:
        return self.gpus * int((self.ends_at - self.starts_at).total_seconds())


class ReservationSettings(models.Model):
    """The site's one row (pk 1): how long before a window the team's GPUs stop being lent."""

    lead_minutes = models.PositiveIntegerField(
        default=DEFAULT_LEAD_MINUTES, validators=[MaxValueValidator(10080)]
    )
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "reservation settings"
        constraints = [
            models.CheckConstraint(
                condition=Q(lead_minutes__lte=10080), name="reservationsettings_lead_at_most_week"
            ),
        ]

    def __str__(self):
        return f"lead time {self.lead_minutes} min"

    @classmethod
    def current(cls) -> "ReservationSettings":
        """The site's settings (defaults until an admin saves them; nothing is written)."""
        return cls.objects.filter(pk=1).first() or cls(pk=1)
