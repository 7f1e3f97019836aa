"""Demo fleet: the kubesim cluster, its GPU models and pools (kubesim/fleets/demo.yaml). Idempotent.

The product labels are what kubesim (like NVIDIA's GPU feature discovery) writes into
`nvidia.com/gpu.product`: the model name with spaces turned into dashes.
"""

from django.conf import settings
from django.db import transaction

from fleet.models import Cluster, GpuModel, NodePool

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
GPU_TOLERATION = {
    "key": "nvidia.com/gpu",
    "operator": "Equal",
    "value": "present",
    "effect": "NoSchedule",
}

GPU_MODELS = [
    {
        "name": "A100-SXM4-80GB",
        "memory_mib": 81920,
        "product_labels": ["NVIDIA-A100-SXM4-80GB"],
        "dcgm_model_names": ["NVIDIA A100-SXM4-80GB"],
    },
    {
        "name": "H100-80GB-HBM3",
        "memory_mib": 81559,
        "product_labels": ["NVIDIA-H100-80GB-HBM3"],
        "dcgm_model_names": ["NVIDIA H100 80GB HBM3"],
    },
    {
        "name": "L4",
        "memory_mib": 23034,
        "product_labels": ["NVIDIA-L4"],
        "dcgm_model_names": ["NVIDIA L4"],
    },
]

# pool name: (GPU model, node labels, interconnect, capacity type)
POOLS = {
    "a100": ("A100-SXM4-80GB", {"accelerator": "nvidia-a100-80gb"}, "nvlink", "on-demand"),
    "h100": ("H100-80GB-HBM3", {"accelerator": "nvidia-h100-80gb"}, "nvlink", "on-demand"),
    "l4": ("L4", {"accelerator": "nvidia-l4"}, "pcie", "on-demand"),
}

CLUSTER_NAME = "kubesim"
# The A100 nodes sit in two racks (kubesim's demo fleet labels them): jobs may ask to keep
# their workers within one rack or on one host.
RACK_LABEL = "cloud.provider.com/topology-rack"
TOPOLOGY = {
    "a100": [
        {"name": "rack", "node_label": RACK_LABEL},
        {"name": "host", "node_label": "kubernetes.io/hostname"},
    ],
}


@transaction.atomic
def seed_fleet() -> Cluster:
    """Register kubesim as the default cluster with the demo GPU models and node pools."""
    models = {}
    for spec in GPU_MODELS:
        fields = dict(spec)
        name = fields.pop("name")
        models[name], _ = GpuModel.objects.update_or_create(name=name, defaults=fields)
    cluster = Cluster.objects.filter(name=CLUSTER_NAME).first()
    if cluster is None:
        Cluster.objects.filter(is_default=True).update(is_default=False)
        cluster = Cluster.objects.create(
            name=CLUSTER_NAME,
            kubeconfig_path=str(settings.KUBECONFIG),
            context=settings.KUBE_CONTEXT,
            scheduler=Cluster.Scheduler.KUEUE,
            kueue_api_version=Cluster.KueueApiVersion.V1BETA2,
            is_default=True,
        )
    elif cluster.kubeconfig_path != str(settings.KUBECONFIG):
        # The demo's kubeconfig may move with QM_VAR_DIR; keep the cluster pointing at it.
        cluster.kubeconfig_path = str(settings.KUBECONFIG)
        cluster.save(update_fields=["kubeconfig_path"])
    for name, (model, labels, interconnect, capacity_type) in POOLS.items():
        NodePool.objects.update_or_create(
            cluster=cluster,
            name=name,
            defaults={
                "gpu_model": models[model],
                "node_selector": labels,
                "taints": [GPU_TAINT],
                "tolerations": [GPU_TOLERATION],
                "interconnect": interconnect,
                "capacity_type": capacity_type,
                "topology_levels": TOPOLOGY.get(name, []),
            },
        )
    return cluster
