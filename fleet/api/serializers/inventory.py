"""API serializers for the inventory: GPU models, pools and nodes."""

from rest_framework import serializers

from fleet.models import Cluster, GpuModel, Node, NodePool
from fleet.quantities import DEFAULT_WORKER_SIZE, cpu_millis, cpu_text, memory_mib, memory_text
from fleet.selectors.inventory import node_free_gpus
from fleet.validators import DNS1123_LABEL_MESSAGE, DNS1123_LABEL_RE


class GpuModelSerializer(serializers.ModelSerializer):
    class Meta:
        model = GpuModel
        fields = ["id", "name", "vendor", "memory_mib", "product_labels", "dcgm_model_names"]
        read_only_fields = fields


class PoolSerializer(serializers.ModelSerializer):
    """A pool with its live figures (context["stats"] from fleet.selectors.pool_stats)."""

    cluster = serializers.SlugRelatedField(slug_field="name", read_only=True)
    gpu_model = serializers.SlugRelatedField(slug_field="name", read_only=True)
    gpus = serializers.SerializerMethodField(help_text="GPUs on the pool's nodes (capacity).")
    gpus_allocatable = serializers.SerializerMethodField()
    gpus_allocated = serializers.SerializerMethodField()
    gpus_free = serializers.SerializerMethodField(
        help_text="Allocatable GPUs not held by pods, on schedulable ready nodes."
    )
    largest_free_block = serializers.SerializerMethodField(
        help_text="The most free GPUs on any one node: the largest single-node job that fits now."
    )
    nodes = serializers.SerializerMethodField()
    cordoned_nodes = serializers.SerializerMethodField()
    cpu_per_gpu = serializers.SerializerMethodField(
        help_text="CPUs a worker gets per GPU when its job does not say: the pool's setting, "
        "else the smallest GPU node's allocatable CPUs divided by its GPUs."
    )
    memory_per_gpu = serializers.SerializerMethodField(help_text="Memory per GPU, likewise.")
    cpu_per_gpu_setting = serializers.SerializerMethodField(
        help_text="The pool's own setting, or null (derived from the nodes)."
    )
    memory_per_gpu_setting = serializers.SerializerMethodField()
    mig_profile = serializers.CharField(
        read_only=True,
        help_text="The MIG profile the pool counts, read from its nodes (empty if none): the "
        "one a platform admin named while every node offers it, else the one of which its nodes "
        "have the most instances. Jobs here get instances of this profile only.",
    )
    gpu_resource = serializers.CharField(
        read_only=True,
        help_text="What jobs and quota count here: nvidia.com/gpu, a MIG pool's "
        "nvidia.com/mig-<profile> (its figures are then instances), or a time-sliced pool's "
        "nvidia.com/gpu.shared when its device plugin renames the shares (renameByDefault).",
    )

    class Meta:
        model = NodePool
        fields = [
            "id",
            "name",
            "cluster",
            "gpu_model",
            "gpus",
            "gpus_allocatable",
            "gpus_allocated",
            "gpus_free",
            "largest_free_block",
            "nodes",
            "cordoned_nodes",
            "capacity_type",
            "interconnect",
            "sharing",
            "node_selector",
            "taints",
            "tolerations",
            "allow_oversubscription",
            "cpu_per_gpu",
            "memory_per_gpu",
            "cpu_per_gpu_setting",
            "memory_per_gpu_setting",
            "topology_levels",
            "mig_profile",
            "gpu_resource",
        ]
        read_only_fields = fields

    def _size(self, pool):
        return (self.context.get("sizes") or {}).get(pool.pk, DEFAULT_WORKER_SIZE)

    def get_cpu_per_gpu(self, pool) -> str:
        return cpu_text(self._size(pool).cpu_per_gpu_millis)

    def get_memory_per_gpu(self, pool) -> str:
        return memory_text(self._size(pool).memory_per_gpu_mib)

    def get_cpu_per_gpu_setting(self, pool) -> str | None:
        return cpu_text(pool.cpu_per_gpu_millis) if pool.cpu_per_gpu_millis else None

    def get_memory_per_gpu_setting(self, pool) -> str | None:
        return memory_text(pool.memory_per_gpu_mib) if pool.memory_per_gpu_mib else None

    def _stat(self, pool, key):
        stats = (self.context.get("stats") or {}).get(pool.pk)
        return stats[key] if stats else 0

    def get_gpus(self, pool) -> int:
        return self._stat(pool, "gpus_total")

    def get_gpus_allocatable(self, pool) -> int:
        return self._stat(pool, "gpus_allocatable")

    def get_gpus_allocated(self, pool) -> int:
        return self._stat(pool, "gpus_allocated")

    def get_gpus_free(self, pool) -> int:
        return self._stat(pool, "gpus_free")

    def get_largest_free_block(self, pool) -> int:
        return self._stat(pool, "largest_free_block")

    def get_nodes(self, pool) -> int:
        return self._stat(pool, "nodes")

    def get_cordoned_nodes(self, pool) -> int:
        return self._stat(pool, "cordoned_nodes")


class PoolWriteSerializer(serializers.Serializer):
    """What an admin sends to create or change a pool; the service checks the structure."""

    cluster = serializers.SlugRelatedField(slug_field="name", queryset=Cluster.objects.all())
    name = serializers.RegexField(
        DNS1123_LABEL_RE, max_length=63, error_messages={"invalid": DNS1123_LABEL_MESSAGE}
    )
    gpu_model = serializers.SlugRelatedField(slug_field="name", queryset=GpuModel.objects.all())
    node_selector = serializers.JSONField()
    taints = serializers.JSONField(required=False, default=list)
    tolerations = serializers.JSONField(
        required=False, help_text="Derived from the taints when left out."
    )
    capacity_type = serializers.ChoiceField(
        NodePool.CapacityType.choices, default=NodePool.CapacityType.ON_DEMAND
    )
    interconnect = serializers.ChoiceField(
        NodePool.Interconnect.choices, default=NodePool.Interconnect.PCIE
    )
    sharing = serializers.ChoiceField(NodePool.Sharing.choices, default=NodePool.Sharing.NONE)
    allow_oversubscription = serializers.BooleanField(default=False)
    cpu_per_gpu = serializers.CharField(
        required=False, allow_null=True, allow_blank=True, default=None, max_length=32,
        help_text='CPUs per GPU a worker gets by default ("12", "11500m"); empty: from the '
        "nodes.",
    )  # fmt: skip
    memory_per_gpu = serializers.CharField(
        required=False, allow_null=True, allow_blank=True, default=None, max_length=32,
        help_text='Memory per GPU ("96Gi"); empty: from the nodes.',
    )  # fmt: skip
    topology_levels = serializers.JSONField(
        required=False,
        help_text='Widest first: [{"name": "rack", "node_label": '
        '"cloud.provider.com/topology-rack"}, ...]; fixed once set.',
    )
    mig_profile = serializers.CharField(
        required=False, allow_blank=True, default="", max_length=32,
        help_text="For MIG nodes that offer several profiles (e.g. 3g.40gb, 2g.20gb and "
        "1g.10gb on one GPU): the one this pool counts, which every node of the pool must "
        "offer. Empty: the profile of which the nodes have the most instances.",
    )  # fmt: skip

    def validate(self, attrs):
        """The quantities as the model's units (cpu_per_gpu_millis, memory_per_gpu_mib)."""
        for field, target, parse in (
            ("cpu_per_gpu", "cpu_per_gpu_millis", cpu_millis),
            ("memory_per_gpu", "memory_per_gpu_mib", memory_mib),
        ):
            if field not in attrs:
                continue
            value = attrs.pop(field)
            if value in (None, ""):
                attrs[target] = None
                continue
            amount = parse(value)
            if not amount or amount > 2**31 - 1:
                raise serializers.ValidationError(
                    {field: 'Give a Kubernetes quantity, e.g. "12" CPUs or "96Gi".'}
                )
            attrs[target] = amount
        return attrs


class NodeSerializer(serializers.ModelSerializer):
    cluster = serializers.SlugRelatedField(slug_field="name", read_only=True)
    pool = serializers.SlugRelatedField(slug_field="name", read_only=True)
    gpu_model = serializers.SlugRelatedField(slug_field="name", read_only=True)
    gpu_free = serializers.SerializerMethodField()

    class Meta:
        model = Node
        fields = [
            "id",
            "name",
            "cluster",
            "pool",
            "gpu_model",
            "gpu_capacity",
            "gpu_allocatable",
            "gpu_allocated",
            "gpu_free",
            "unschedulable",
            "ready",
            "labels",
            "taints",
            "conditions",
            "last_seen_at",
        ]
        read_only_fields = fields

    def get_gpu_free(self, node) -> int:
        return node_free_gpus(node)
