"""Preemption protection: the checkpoints a job reports, and what each preemption cost."""

from django.conf import settings
from django.db import models
from django.db.models import Q

from queues.models.jobs import Job
from queues.models.tenancy import Team


class JobCheckpoint(models.Model):
    """A checkpoint a running job reported (through the API, or a marker line in its log)."""

    class Source(models.TextChoices):
        API = "api", "API"
        LOG = "log", "Marker in the job's log"

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="checkpoints")
    at = models.DateTimeField()
    step = models.PositiveBigIntegerField(null=True, blank=True)
    path = models.CharField(max_length=500, blank=True)
    source = models.CharField(max_length=8, choices=Source.choices, default=Source.API)
    reported_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["job", "-at"], name="checkpoint_job_latest")]

    def __str__(self):
        return f"checkpoint of job {self.job_id} at {self.at:%Y-%m-%d %H:%M:%S}"


class JobPreemption(models.Model):
    """One preemption of a job: when, the work lost (GPU-seconds since its last checkpoint, or
    since the run started when it had none), and the priority class it ran under (why Kueue
    chose it). Billing reports the lost GPU-hours per team and month."""

    job = models.ForeignKey(Job, on_delete=models.PROTECT, related_name="preemption_losses")
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="preemption_losses")
    at = models.DateTimeField()
    run_started_at = models.DateTimeField(null=True, blank=True)
    checkpoint_at = models.DateTimeField(null=True, blank=True)
    gpus = models.PositiveIntegerField()
    lost_gpu_seconds = models.PositiveBigIntegerField()
    priority_class = models.CharField(max_length=63, blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["team", "at"], name="preemption_team_at")]
        constraints = [
            models.UniqueConstraint(fields=["job", "at"], name="preemption_job_at_once"),
            models.CheckConstraint(
                condition=Q(checkpoint_at__isnull=True) | Q(checkpoint_at__lte=models.F("at")),
                name="preemption_checkpoint_before",
            ),
        ]

    def __str__(self):
        return f"preemption of job {self.job_id} at {self.at:%Y-%m-%d %H:%M:%S}"
