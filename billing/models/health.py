"""GPU health from DCGM, the faults it shows, and the credit a fault earns the teams it hit.

See billing.services.gpufaults for the loop: observe → fault → taint → stop, resubmit and tell
each job's owner → credit the GPU-hours lost → (a platform admin) return the node to service.
"""

from django.conf import settings
from django.db import models
from django.db.models import Q

from fleet.models import Cluster
from queues.models import Job, Team


class GpuHealth(models.Model):
    """The latest health of one GPU (cluster × GPU UUID) and the counters it was judged by."""

    class State(models.TextChoices):
        HEALTHY = "healthy", "Healthy"
        DEGRADED = "degraded", "Degraded"
        FAILED = "failed", "Failed"

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    node_name = models.CharField(max_length=253)
    gpu_uuid = models.CharField(max_length=128)
    gpu_index = models.PositiveSmallIntegerField(default=0)
    model_name = models.CharField(max_length=200, blank=True)
    state = models.CharField(max_length=16, choices=State.choices, default=State.HEALTHY)
    reason = models.TextField(blank=True)
    last_xid = models.PositiveIntegerField(default=0)
    ecc_dbe_total = models.BigIntegerField(default=0)
    thermal_violation_ns = models.BigIntegerField(default=0)
    power_violation_ns = models.BigIntegerField(default=0)
    # Share of the time since the previous observation the GPU spent throttled (0-1).
    thermal_share = models.FloatField(null=True, blank=True)
    power_share = models.FloatField(null=True, blank=True)
    # What a platform admin accepted when returning the GPU's node to service: the exporter
    # keeps reporting the last XID and the error count, so only a change from these is news.
    xid_accepted = models.PositiveIntegerField(default=0)
    dbe_accepted = models.BigIntegerField(default=0)
    # XIDs per code ("79": 2) in the exporter's window at the last reading: a count that grows
    # is the same XID again, which the last-XID gauge does not show.
    xid_counts = models.JSONField(default=dict, blank=True)
    observed_at = models.DateTimeField()
    state_since = models.DateTimeField()

    class Meta:
        ordering = ["cluster__name", "node_name", "gpu_index"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "gpu_uuid"], name="gpuhealth_unique_gpu"),
        ]
        indexes = [models.Index(fields=["cluster", "node_name"], name="gpuhealth_node")]

    def __str__(self):
        return f"{self.node_name}/{self.gpu_index} {self.state}"


class GpuHealthEvent(models.Model):
    """A GPU's health changed (or a person returned it to service): the history admins read."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    node_name = models.CharField(max_length=253)
    gpu_uuid = models.CharField(max_length=128)
    gpu_index = models.PositiveSmallIntegerField(default=0)
    at = models.DateTimeField()
    state = models.CharField(max_length=16, choices=GpuHealth.State.choices)
    reason = models.TextField(blank=True)

    class Meta:
        ordering = ["-at", "-pk"]
        indexes = [models.Index(fields=["cluster", "node_name", "at"], name="gpuhealthevent_node")]

    def __str__(self):
        return f"{self.at:%Y-%m-%d %H:%M} {self.node_name}/{self.gpu_index} {self.state}"


class GpuFault(models.Model):
    """A GPU that failed, and what the portal did about its node until it was back in service."""

    class State(models.TextChoices):
        OPEN = "open", "Detected"
        CONTAINED = "contained", "Node tainted, jobs moved"
        RETURNING = "returning", "Returning to service"
        RETURNED = "returned", "Returned to service"

    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="+")
    node_name = models.CharField(max_length=253)
    gpu_uuid = models.CharField(max_length=128)
    gpu_index = models.PositiveSmallIntegerField(default=0)
    model_name = models.CharField(max_length=200, blank=True)
    xid = models.PositiveIntegerField(default=0)
    reason = models.TextField()
    # The pods the exporter saw holding the GPU when it failed: [[namespace, pod], ...].
    pods = models.JSONField(default=list, blank=True)
    detected_at = models.DateTimeField()
    state = models.CharField(max_length=16, choices=State.choices, default=State.OPEN)
    tainted_at = models.DateTimeField(null=True, blank=True)
    contained_at = models.DateTimeField(null=True, blank=True)
    return_requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    return_reason = models.TextField(blank=True)
    returned_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)

    class Meta:
        ordering = ["-detected_at", "-pk"]
        constraints = [
            # One fault at a time per GPU: a loop that runs twice finds the one it opened.
            models.UniqueConstraint(
                fields=["cluster", "gpu_uuid"],
                condition=~Q(state="returned"),
                name="gpufault_one_open_per_gpu",
            ),
        ]
        indexes = [models.Index(fields=["cluster", "node_name"], name="gpufault_node")]

    def __str__(self):
        return f"fault #{self.pk} {self.node_name}/{self.gpu_index} {self.state}"


class GpuFaultCredit(models.Model):
    """One job a fault hit: what was done about it, and the GPU-hours credited to its team.

    The credit is priced once, when the job is stopped, at the price book's price for the job's
    GPU model at the fault; the row is what finance audits (the fault, the job, the seconds, the
    price) and the month's report lists it as a credit line.
    """

    fault = models.ForeignKey(GpuFault, on_delete=models.PROTECT, related_name="credits")
    job = models.ForeignKey(Job, on_delete=models.PROTECT, related_name="gpu_fault_credits")
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="gpu_fault_credits")
    gpu_seconds_lost = models.BigIntegerField(default=0)
    # The job's last checkpoint before the fault, when the loss is counted from it (the work
    # before it was saved; the resubmitted job resumes from it). None: counted from the start.
    checkpoint_at = models.DateTimeField(null=True, blank=True)
    price_per_hour = models.DecimalField(max_digits=12, decimal_places=4, null=True, blank=True)
    currency = models.CharField(max_length=3, default="EUR")
    amount = models.DecimalField(max_digits=12, decimal_places=2, default=0)
    stopped_at = models.DateTimeField(null=True, blank=True)
    resubmitted_job = models.ForeignKey(
        Job, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    resubmit_error = models.TextField(blank=True)
    notified_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        constraints = [
            models.UniqueConstraint(fields=["fault", "job"], name="gpufaultcredit_unique_job"),
            models.CheckConstraint(
                condition=Q(gpu_seconds_lost__gte=0) & Q(amount__gte=0),
                name="gpufaultcredit_non_negative",
            ),
        ]

    def __str__(self):
        return f"credit {self.amount} {self.currency} for job {self.job_id} (fault {self.fault_id})"
