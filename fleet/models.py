"""Fleet: clusters, pools, nodes, GPU models. Also the worker heartbeat the portal reports on."""

from django.conf import settings
from django.contrib.postgres.constraints import ExclusionConstraint
from django.contrib.postgres.fields import DateTimeRangeField, RangeOperators
from django.db import models

from fleet.validators import dns1123_label


class WorkerHeartbeat(models.Model):
    """The last time a Celery worker ran the heartbeat task; one row per worker hostname."""

    hostname = models.CharField(max_length=255, unique=True)
    nonce = models.CharField(max_length=64, blank=True)
    seen_at = models.DateTimeField()

    def __str__(self):
        return f"{self.hostname} @ {self.seen_at:%Y-%m-%d %H:%M:%S}"


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
    last_sync_at = models.DateTimeField(null=True, blank=True)
    last_sync_error = models.TextField(blank=True)
    # When a worker was last asked to apply the cluster's submitted jobs, cleared by the worker
    # before it reads them: a burst of submissions sends one message, not one per job.
    jobs_apply_requested_at = models.DateTimeField(null=True, blank=True)
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


class GpuModel(models.Model):
    """A GPU product, with the strings that identify it in node labels and DCGM metrics."""

    name = models.CharField(max_length=100, unique=True)
    vendor = models.CharField(max_length=50, default="NVIDIA")
    memory_mib = models.PositiveIntegerField(null=True, blank=True)
    product_labels = models.JSONField(default=list, blank=True)
    dcgm_model_names = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name


class NodePool(models.Model):
    """Nodes with one GPU model and one placement policy: a Kueue ResourceFlavor."""

    class CapacityType(models.TextChoices):
        ON_DEMAND = "on-demand", "On-demand"
        SPOT = "spot", "Spot"

    class Interconnect(models.TextChoices):
        NVLINK = "nvlink", "NVLink"
        PCIE = "pcie", "PCIe"

    class Sharing(models.TextChoices):
        NONE = "none", "Whole GPUs"
        MIG = "mig", "MIG profiles"
        TIME_SLICING = "time-slicing", "Time-slicing"

    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="pools")
    name = models.CharField(max_length=63, validators=[dns1123_label])
    gpu_model = models.ForeignKey(GpuModel, on_delete=models.PROTECT, related_name="pools")
    node_selector = models.JSONField(default=dict, blank=True)
    taints = models.JSONField(default=list, blank=True)
    tolerations = models.JSONField(default=list, blank=True)
    capacity_type = models.CharField(
        max_length=16, choices=CapacityType.choices, default=CapacityType.ON_DEMAND
    )
    interconnect = models.CharField(
        max_length=16, choices=Interconnect.choices, default=Interconnect.PCIE
    )
    sharing = models.CharField(max_length=16, choices=Sharing.choices, default=Sharing.NONE)
    allow_oversubscription = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["cluster__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="nodepool_unique_name"),
        ]

    def __str__(self):
        return self.name


class Node(models.Model):
    """A node discovered from the cluster by inventory sync."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="nodes")
    name = models.CharField(max_length=253)
    pool = models.ForeignKey(
        NodePool, on_delete=models.SET_NULL, null=True, blank=True, related_name="nodes"
    )
    gpu_model = models.ForeignKey(
        GpuModel, on_delete=models.SET_NULL, null=True, blank=True, related_name="nodes"
    )
    gpu_capacity = models.PositiveIntegerField(default=0)
    gpu_allocatable = models.PositiveIntegerField(default=0)
    gpu_allocated = models.PositiveIntegerField(default=0)
    labels = models.JSONField(default=dict, blank=True)
    taints = models.JSONField(default=list, blank=True)
    unschedulable = models.BooleanField(default=False)
    ready = models.BooleanField(default=True)
    conditions = models.JSONField(default=list, blank=True)
    last_seen_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["cluster__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="node_unique_name"),
        ]

    def __str__(self):
        return self.name


class TsTzRange(models.Func):
    """tstzrange(lower, upper, bounds): the half-open period of a price row (PostgreSQL)."""

    function = "TSTZRANGE"
    output_field = DateTimeRangeField()


class PostgresExclusionConstraint(ExclusionConstraint):
    """An exclusion constraint created on PostgreSQL only; other databases skip it.

    SQLite (the embedded default) has no GiST; there the price-book services check overlaps
    (fleet.prices.price_overlaps) before every write instead.
    """

    def constraint_sql(self, model, schema_editor):
        if schema_editor.connection.vendor != "postgresql":
            return None
        # Tables built straight from the models (tests with --nomigrations) get no
        # BtreeGistExtension operation, and the equality parts need btree_gist.
        schema_editor.execute("CREATE EXTENSION IF NOT EXISTS btree_gist")
        return super().constraint_sql(model, schema_editor)

    def create_sql(self, model, schema_editor):
        if schema_editor.connection.vendor != "postgresql":
            return None
        return super().create_sql(model, schema_editor)

    def remove_sql(self, model, schema_editor):
        if schema_editor.connection.vendor != "postgresql":
            return None
        return super().remove_sql(model, schema_editor)

    def validate(self, model, instance, exclude=None, using="default"):
        from django.db import connections

        if connections[using].vendor != "postgresql":
            return
        super().validate(model, instance, exclude=exclude, using=using)


class GpuPrice(models.Model):
    """The price of one GPU-hour of a model (and MIG profile) over a half-open period."""

    gpu_model = models.ForeignKey(GpuModel, on_delete=models.PROTECT, related_name="prices")
    mig_profile = models.CharField(max_length=32, blank=True)
    price_per_hour = models.DecimalField(max_digits=12, decimal_places=4)
    currency = models.CharField(max_length=3, default="EUR")
    effective_from = models.DateTimeField()
    effective_to = models.DateTimeField(null=True, blank=True)
    note = models.CharField(max_length=200, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["gpu_model__name", "mig_profile", "effective_from"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(price_per_hour__gte=0), name="gpuprice_non_negative"
            ),
            models.CheckConstraint(
                condition=models.Q(effective_to__isnull=True)
                | models.Q(effective_to__gt=models.F("effective_from")),
                name="gpuprice_period_valid",
            ),
            # Needs the btree_gist extension for the equality parts (BtreeGistExtension()).
            PostgresExclusionConstraint(
                name="gpuprice_no_overlap",
                expressions=[
                    ("gpu_model", RangeOperators.EQUAL),
                    ("mig_profile", RangeOperators.EQUAL),
                    (
                        TsTzRange(
                            "effective_from",
                            "effective_to",
                            models.Value("[)"),
                        ),
                        RangeOperators.OVERLAPS,
                    ),
                ],
                violation_error_message="Another price for this GPU model and MIG profile "
                "is in force during part of this period.",
            ),
        ]

    def __str__(self):
        return f"{self.gpu_model} {self.price_per_hour} {self.currency}/h"
