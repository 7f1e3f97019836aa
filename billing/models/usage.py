"""Usage data: GPU-hours per pod from DCGM, their daily rollups, and ingestion bookkeeping."""

from django.db import models
from django.db.models import F, Q

from fleet.models import Cluster, GpuModel, NodePool
from queues.models import Job, Team


class UsageHour(models.Model):
    """One GPU × pod × hour: seconds held and busy, memory, energy, anomaly flags.

    A row with an empty pod is the GPU's idle capacity in that hour. Re-ingesting an hour
    updates its rows (the unique constraint), so an hour is never billed twice.
    """

    class Source(models.TextChoices):
        PROMETHEUS = "prometheus", "Prometheus"
        SCRAPE = "scrape", "Direct scrape"

    hour = models.DateTimeField()  # start of the hour, UTC; the row covers [hour, hour + 1 h)
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="usage_hours")
    gpu_uuid = models.CharField(max_length=100)
    model_name = models.CharField(max_length=200, blank=True)  # DCGM modelName as reported
    gpu_model = models.ForeignKey(
        GpuModel, on_delete=models.PROTECT, null=True, blank=True, related_name="usage_hours"
    )
    mig_profile = models.CharField(max_length=32, blank=True)
    node = models.CharField(max_length=253, blank=True)
    pool = models.ForeignKey(
        NodePool, on_delete=models.PROTECT, null=True, blank=True, related_name="usage_hours"
    )
    namespace = models.CharField(max_length=63, blank=True)
    pod = models.CharField(max_length=253, blank=True)
    team = models.ForeignKey(
        Team, on_delete=models.PROTECT, null=True, blank=True, related_name="usage_hours"
    )
    job = models.ForeignKey(
        Job, on_delete=models.PROTECT, null=True, blank=True, related_name="usage_hours"
    )
    seconds_allocated = models.PositiveIntegerField(default=0)  # held by the pod
    seconds_idle = models.PositiveIntegerField(default=0)  # present with no pod
    seconds_busy = models.PositiveIntegerField(default=0)  # utilisation-weighted
    util_mean = models.FloatField(default=0.0)  # percent
    memory_used_mib_mean = models.FloatField(default=0.0)
    memory_used_mib_max = models.PositiveIntegerField(default=0)
    # None when the exporter gave no energy reading for the hour: not measured, never "0 J".
    energy_joules = models.FloatField(null=True, blank=True)
    sample_count = models.PositiveIntegerField(default=0)
    expected_samples = models.PositiveIntegerField(default=0)
    flag_gap = models.BooleanField(default=False)
    flag_stuck_zero = models.BooleanField(default=False)
    flag_unknown_model = models.BooleanField(default=False)
    # seconds_allocated was set from the pod's recorded start and end (exact to the second)
    # rather than counted from samples.
    exact_times = models.BooleanField(default=False)
    source = models.CharField(max_length=16, choices=Source.choices, default=Source.SCRAPE)
    # Running sums kept by the direct scrape so each scrape can update the row incrementally.
    util_sum = models.FloatField(default=0.0)
    busy_sum = models.FloatField(default=0.0)
    memory_sum = models.FloatField(default=0.0)
    energy_first_mj = models.FloatField(null=True, blank=True)
    energy_last_mj = models.FloatField(null=True, blank=True)
    # A pod's utilisation within the hour, from the direct scrape: {"<minute the 5-minute
    # bucket starts>": [sum of utilisation samples, samples]}; a job's page charts a short job
    # from it (Prometheus hours have none and chart by the hour).
    util_buckets = models.JSONField(default=dict, blank=True)
    last_sample_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["hour", "gpu_uuid", "pod"]
        constraints = [
            models.UniqueConstraint(
                fields=["hour", "cluster", "gpu_uuid", "pod"], name="usagehour_unique_gpu_pod"
            ),
            models.CheckConstraint(
                condition=Q(seconds_allocated__lte=3600)
                & Q(seconds_idle__lte=3600)
                & Q(seconds_busy__lte=F("seconds_allocated") + F("seconds_idle")),
                name="usagehour_seconds_within_hour",
            ),
            models.CheckConstraint(
                condition=Q(pod="") | Q(seconds_idle=0), name="usagehour_idle_only_without_pod"
            ),
        ]
        indexes = [
            models.Index(fields=["hour", "team"], name="usagehour_hour_team"),
            models.Index(fields=["team", "hour"], name="usagehour_team_hour"),
            models.Index(fields=["job"], name="usagehour_job"),
        ]

    def __str__(self):
        return f"{self.hour:%Y-%m-%d %H:00} {self.gpu_uuid} {self.pod or '(idle)'}"


class UsageDay(models.Model):
    """UsageHour rows of one UTC day summed per team, job, GPU model, pool and DCGM model name.

    Derived data, rebuilt from UsageHour when a day's hours change (UsageDayState.dirty); the
    reports read it for clean past days so a month is ~100k rows instead of millions.
    """

    day = models.DateField()
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    team = models.ForeignKey(
        Team, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    job = models.ForeignKey(Job, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    gpu_model = models.ForeignKey(
        GpuModel, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    mig_profile = models.CharField(max_length=32, blank=True)
    pool = models.ForeignKey(
        NodePool, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    model_name = models.CharField(max_length=200, blank=True)
    allocated = models.BigIntegerField(default=0)
    used = models.BigIntegerField(default=0)
    idle = models.BigIntegerField(default=0)
    util_weighted = models.FloatField(default=0.0)
    gap_rows = models.IntegerField(default=0)
    stuck_rows = models.IntegerField(default=0)
    unknown_rows = models.IntegerField(default=0)
    unknown_seconds = models.BigIntegerField(default=0)

    class Meta:
        indexes = [
            models.Index(fields=["day", "cluster"], name="usageday_day_cluster"),
            models.Index(fields=["team", "day"], name="usageday_team_day"),
        ]

    def __str__(self):
        return f"{self.day} {self.team_id} {self.job_id}"


class UsageDayState(models.Model):
    """Whether a cluster's day has changed since its UsageDay rows were built."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    dirty = models.BooleanField(default=True)
    refreshed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["cluster", "day"], name="usagedaystate_unique_day"),
        ]

    def __str__(self):
        return f"{self.cluster_id} {self.day} {'dirty' if self.dirty else 'clean'}"


class ScrapeState(models.Model):
    """The last direct scrape of one exporter URL: the next scrape credits the time between."""

    url = models.CharField(max_length=500, unique=True)
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    last_scrape_at = models.DateTimeField(null=True, blank=True)
    # GPU UUIDs the last scrape saw: one missing from the next scrape is a gap in its series.
    last_gpus = models.JSONField(default=list, blank=True)
    last_error = models.TextField(blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)

    def __str__(self):
        return self.url


class IdleWatchState(models.Model):
    """The last live look at a Prometheus-metered cluster's GPU utilisation (idle GPUs): a
    cluster not looked at lately has no current idle flags and is left alone."""

    cluster = models.OneToOneField(Cluster, on_delete=models.CASCADE, related_name="+")
    observed_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)

    def __str__(self):
        return f"idle watch of {self.cluster}"


class IngestState(models.Model):
    """One hour ingested from Prometheus (or failed): the backfill finds the missing ones."""

    class State(models.TextChoices):
        DONE = "done", "Done"
        FAILED = "failed", "Failed"

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    hour = models.DateTimeField()
    state = models.CharField(max_length=16, choices=State.choices)
    rows = models.PositiveIntegerField(default=0)
    largest_query_samples = models.BigIntegerField(default=0)
    error = models.TextField(blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-hour"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "hour"], name="ingeststate_unique_hour"),
        ]

    def __str__(self):
        return f"{self.cluster} {self.hour:%Y-%m-%d %H:00} {self.state}"
