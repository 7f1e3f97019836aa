"""What-if runs: a proposed quota configuration replayed against the recorded job history. Its
table keeps the name it had in queues (no data moved)."""

from django.conf import settings
from django.db import models


class WhatIfRun(models.Model):
    """One replay of the last `days` of jobs, today's configuration beside the proposal.

    `proposal`: {"quotas": [{team, pool, nominal_gpus, borrowing_limit, lending_limit}],
    "pool_sizes": [{pool, gpus}], "tiers": [{tier, value}]} (changes only; pools by id).
    `result`: the figures of both runs (planning.services.whatif), once done.
    """

    class State(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"

    name = models.CharField(max_length=200)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="whatif_runs"
    )
    days = models.PositiveSmallIntegerField(default=30)
    proposal = models.JSONField(default=dict)
    state = models.CharField(max_length=16, choices=State.choices, default=State.QUEUED)
    error = models.TextField(blank=True)
    result = models.JSONField(null=True, blank=True)
    seconds = models.FloatField(null=True, blank=True)  # how long the replay took
    applied_at = models.DateTimeField(null=True, blank=True)
    applied_requests = models.JSONField(default=list, blank=True)  # quota request ids filed
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # The replay's task was last sent at; the worker process ("host:pid") replaying it since.
    dispatched_at = models.DateTimeField(null=True, blank=True)
    claimed_by = models.CharField(max_length=255, blank=True)
    claimed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "queues_whatifrun"
        ordering = ["-created_at"]

    def __str__(self):
        return f"What-if #{self.pk} {self.name} ({self.state})"
