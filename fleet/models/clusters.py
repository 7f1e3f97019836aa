"""Clusters the portal manages."""

from django.db import models

from core.validators import http_url
from fleet.validators import dns1123_label


class Cluster(models.Model):
    """A Kubernetes cluster the portal manages, reached by kubeconfig or in-cluster config."""

    class Scheduler(models.TextChoices):
        KUEUE = "kueue", "Kueue"
        VOLCANO = "volcano", "Volcano"

    class KueueApiVersion(models.TextChoices):
        V1BETA2 = "v1beta2", "v1beta2"
        V1BETA1 = "v1beta1", "v1beta1 (older Kueue)"

    name = models.CharField(max_length=63, unique=True, validators=[dns1123_label])
    kubeconfig_path = models.CharField(max_length=500, blank=True)
    context = models.CharField(max_length=200, blank=True)
    in_cluster = models.BooleanField(default=False)
    scheduler = models.CharField(max_length=16, choices=Scheduler.choices, default=Scheduler.KUEUE)
    kueue_api_version = models.CharField(
        max_length=16, choices=KueueApiVersion.choices, default=KueueApiVersion.V1BETA2
    )
    is_default = models.BooleanField(default=False)
    # Where billing reads this cluster's DCGM metrics: its exporters' URLs (scraped directly),
    # or its own Prometheus. Empty on the default cluster: DCGM_SCRAPE_URLS / PROMETHEUS_URL.
    dcgm_scrape_urls = models.JSONField(default=list, blank=True)
    prometheus_url = models.URLField(blank=True, validators=[http_url])
    last_sync_at = models.DateTimeField(null=True, blank=True)
    last_sync_error = models.TextField(blank=True)
    # When a worker was last asked to apply the cluster's submitted jobs, cleared by the worker
    # before it reads them: a burst of submissions sends one message, not one per job.
    jobs_apply_requested_at = models.DateTimeField(null=True, blank=True)
    # A disabled cluster is left alone: nothing is applied to it or read from it, and what it
    # runs keeps running. Jobs for it wait with the reason.
    enabled = models.BooleanField(default=True)
    disabled_reason = models.CharField(max_length=500, blank=True)
    # Deleted by a platform admin: gone from the portal's lists and never contacted again. The
    # row stays only while jobs or usage of the past refer to it (history is never rewritten).
    deleted_at = models.DateTimeField(null=True, blank=True)
    # Health, as the portal's requests found it (fleet.kube.health writes these): the last
    # answer, its latency, since when it has not answered, and when the next try is due (until
    # then requests to it fail at once, so one dead cluster cannot hold up the workers).
    last_contact_at = models.DateTimeField(null=True, blank=True)
    api_latency_ms = models.PositiveIntegerField(null=True, blank=True)
    unreachable_since = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)
    retry_at = models.DateTimeField(null=True, blank=True)
    # One worker at a time applies a cluster's jobs: a slow cluster holds one worker, never all.
    apply_lease_until = models.DateTimeField(null=True, blank=True)
    # Who holds the lease: "host:pid/run", the run being the task's id, which its retries keep,
    # so that a drain cut off (by the database going away, say) takes its own lease back.
    apply_lease_by = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(in_cluster=True) | ~models.Q(kubeconfig_path=""),
                name="cluster_has_connection",
            ),
            models.UniqueConstraint(
                fields=["is_default"],
                condition=models.Q(is_default=True),
                name="cluster_one_default",
            ),
        ]

    def __str__(self):
        return self.name

    @property
    def unreachable(self) -> bool:
        return self.unreachable_since is not None
