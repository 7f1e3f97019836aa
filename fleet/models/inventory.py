"""Inventory: GPU models, node pools (a placement policy over nodes of one model) and nodes."""

from django.db import models

from fleet.models.clusters import Cluster
from fleet.validators import dns1123_label

GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
# Time-sliced GPUs under the device plugin's renameByDefault: the shares are advertised (and
# must be requested) as this resource instead of nvidia.com/gpu.
SHARED_GPU_RESOURCE = "nvidia.com/gpu.shared"


def is_gpu_resource(name: str) -> bool:
    """Whether an extended resource is a GPU the portal counts: whole GPUs, time-sliced shares
    (renamed or not) or MIG instances of any profile."""
    return name in (GPU_RESOURCE, SHARED_GPU_RESOURCE) or name.startswith(MIG_RESOURCE_PREFIX)


# Spot nodes carry this taint (GKE's); only interruptible jobs tolerate it, so Kueue admits no
# other job into a spot pool's flavor, whose tolerations leave it out.
SPOT_TAINT = {"key": "cloud.google.com/gke-spot", "value": "true", "effect": "NoSchedule"}


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
    # Read from the nodes by the inventory sync: MIG (one profile per pool, its instances are
    # the pool's unit: quota, jobs and prices count them) or time-slicing.
    sharing = models.CharField(max_length=16, choices=Sharing.choices, default=Sharing.NONE)
    # The MIG profile the pool counts. Nodes may offer several (mixed strategy): the sync keeps
    # the one set here while every node of the pool offers it, else takes the profile of which
    # the pool's nodes have the most instances.
    mig_profile = models.CharField(max_length=32, blank=True)
    # "mixed": instances are nvidia.com/mig-<profile>; "single": they are nvidia.com/gpu.
    mig_strategy = models.CharField(max_length=16, blank=True)
    # Time-slicing with the device plugin's renameByDefault (read from the nodes): the shares
    # are nvidia.com/gpu.shared.
    shares_renamed = models.BooleanField(default=False)
    allow_oversubscription = models.BooleanField(default=False)
    # What a worker gets per GPU when the job does not say (its share of a node); empty: the
    # smallest node's allocatable CPU and memory divided by its GPUs.
    cpu_per_gpu_millis = models.PositiveIntegerField(null=True, blank=True)
    memory_per_gpu_mib = models.PositiveIntegerField(null=True, blank=True)
    # The pool's topology, widest level first: [{"name": "rack", "node_label":
    # "cloud.provider.com/topology-rack"}, ...]; rendered as a Kueue Topology that the pool's
    # ResourceFlavor names, so jobs can ask to keep their workers within one domain of a level.
    topology_levels = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["cluster__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="nodepool_unique_name"),
        ]

    def __str__(self):
        return self.name

    @property
    def gpu_resource(self) -> str:
        """The extended resource the pool's GPUs are requested as."""
        if self.sharing == self.Sharing.MIG and self.mig_profile and self.mig_strategy != "single":
            return f"{MIG_RESOURCE_PREFIX}{self.mig_profile}"
        if self.sharing == self.Sharing.TIME_SLICING and self.shares_renamed:
            return SHARED_GPU_RESOURCE
        return GPU_RESOURCE

    @property
    def gpu_unit(self) -> str:
        """What one unit of the pool is, in words ("GPU", "MIG 1g.10gb instance")."""
        if self.sharing == self.Sharing.MIG and self.mig_profile:
            return f"MIG {self.mig_profile} instance"
        if self.sharing == self.Sharing.TIME_SLICING:
            return "time-sliced GPU share"
        return "GPU"

    def topology_level(self, name: str) -> dict | None:
        """The topology level called name ("rack"), or None."""
        return next((lv for lv in self.topology_levels or [] if lv.get("name") == name), None)


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
    cpu_allocatable_millis = models.PositiveIntegerField(default=0)
    memory_allocatable_mib = models.PositiveIntegerField(default=0)
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
