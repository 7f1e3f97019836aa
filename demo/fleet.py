"""Demo fleet: the two kubesim clusters of `make run`, their GPU models and pools. Idempotent.

- `kubesim` (Kueue, the default; kubesim/fleets/demo.yaml): whole A100, H100 and L4 GPUs, a
  MIG pool (A100s cut into 1g.10gb instances), a time-sliced L4 pool (four shares per GPU) and
  a spot L4 pool whose nodes the provider takes back now and then;
- `lab` (Volcano; kubesim/fleets/demo-lab.yaml, the `kubesim-lab` process): two nodes of L40S.

The product labels are what kubesim (like NVIDIA's GPU feature discovery) writes into
`nvidia.com/gpu.product`: the model name with spaces turned into dashes.
"""

from django.conf import settings
from django.db import transaction

from fleet.models import Cluster, GpuModel, NodePool
from fleet.models.inventory import SPOT_TAINT

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
    {
        "name": "L40S",
        "memory_mib": 46068,
        "product_labels": ["NVIDIA-L40S"],
        "dcgm_model_names": ["NVIDIA L40S"],
    },
]

CLUSTER_NAME = "kubesim"
LAB_CLUSTER_NAME = "lab"
MIG_PROFILE = "1g.10gb"
TIME_SLICES = 4

# cluster: {pool name: (GPU model, node labels, interconnect, capacity type, sharing)}, as in
# the cluster's fleet file; sharing is (mode, MIG profile, MIG strategy), as the inventory sync
# reads it from the nodes (seeded too, so that quotas count the right unit from the start).
WHOLE = (NodePool.Sharing.NONE, "", "")
POOLS = {
    CLUSTER_NAME: {
        "a100": ("A100-SXM4-80GB", {"accelerator": "nvidia-a100-80gb"}, "nvlink", "on-demand",
                 WHOLE),
        "h100": ("H100-80GB-HBM3", {"accelerator": "nvidia-h100-80gb"}, "nvlink", "on-demand",
                 WHOLE),
        "l4": ("L4", {"accelerator": "nvidia-l4"}, "pcie", "on-demand", WHOLE),
        "a100-mig": ("A100-SXM4-80GB", {"accelerator": "nvidia-a100-80gb-mig"}, "nvlink",
                     "on-demand", (NodePool.Sharing.MIG, MIG_PROFILE, "mixed")),
        "l4-shared": ("L4", {"accelerator": "nvidia-l4-shared"}, "pcie", "on-demand",
                      (NodePool.Sharing.TIME_SLICING, "", "")),
        "l4-spot": ("L4", {"accelerator": "nvidia-l4-spot"}, "pcie", "spot", WHOLE),
    },
    LAB_CLUSTER_NAME: {
        "l40s": ("L40S", {"accelerator": "nvidia-l40s"}, "pcie", "on-demand", WHOLE),
    },
}  # fmt: skip

# The A100 nodes sit in two racks (kubesim's demo fleet labels them): jobs may ask to keep
# their workers within one rack or on one host.
RACK_LABEL = "cloud.provider.com/topology-rack"
TOPOLOGY = {
    "a100": [
        {"name": "rack", "node_label": RACK_LABEL},
        {"name": "host", "node_label": "kubernetes.io/hostname"},
    ],
}

# pool: (nodes, units per node), as in the fleet files: what the demo's history ran on.
NODES = {
    "a100": (4, 8), "h100": (2, 8), "l4": (4, 4), "a100-mig": (1, 8 * 7),
    "l4-shared": (1, 4 * TIME_SLICES), "l4-spot": (2, 4), "l40s": (2, 4),
}  # fmt: skip


def lab_kubeconfig() -> str:
    """Where the kubesim-lab process writes its kubeconfig (scripts/serve kubesim-lab)."""
    return str(settings.VAR_DIR / "kubesim-lab" / "kubeconfig")


@transaction.atomic
def seed_fleet() -> Cluster:
    """Register the demo's clusters (kubesim the default, lab on Volcano) with the demo GPU
    models and node pools; returns the default cluster."""
    models = {}
    for spec in GPU_MODELS:
        fields = dict(spec)
        name = fields.pop("name")
        models[name], _ = GpuModel.objects.update_or_create(name=name, defaults=fields)
    cluster = _cluster(CLUSTER_NAME, str(settings.KUBECONFIG), Cluster.Scheduler.KUEUE,
                       default=True, context=settings.KUBE_CONTEXT)  # fmt: skip
    scrape = [f"http://127.0.0.1:{settings.KUBESIM_LAB_PORT}/metrics/dcgm"]
    lab = _cluster(LAB_CLUSTER_NAME, lab_kubeconfig(), Cluster.Scheduler.VOLCANO, default=False,
                   scrape=scrape)  # fmt: skip
    for where in (cluster, lab):
        for name, (model, labels, interconnect, capacity, sharing) in POOLS[where.name].items():
            taints = [GPU_TAINT, SPOT_TAINT] if capacity == "spot" else [GPU_TAINT]
            NodePool.objects.update_or_create(
                cluster=where,
                name=name,
                defaults={
                    "gpu_model": models[model],
                    "node_selector": labels,
                    "taints": taints,
                    # Not the spot taint: only interruptible jobs tolerate it.
                    "tolerations": [GPU_TOLERATION],
                    "interconnect": interconnect,
                    "capacity_type": capacity,
                    "sharing": sharing[0],
                    "mig_profile": sharing[1],
                    "mig_strategy": sharing[2],
                    "topology_levels": TOPOLOGY.get(name, []),
                },
            )
    return cluster


def _cluster(name, kubeconfig, scheduler, *, default, context="", scrape=()) -> Cluster:
    """The demo cluster called `name`, made or pointed at `kubeconfig` (which may move with
    QM_VAR_DIR)."""
    cluster = Cluster.objects.filter(name=name).first()
    if cluster is None:
        if default:
            Cluster.objects.filter(is_default=True).update(is_default=False)
        return Cluster.objects.create(
            name=name, kubeconfig_path=kubeconfig, context=context, scheduler=scheduler,
            kueue_api_version=Cluster.KueueApiVersion.V1BETA2, is_default=default,
            dcgm_scrape_urls=list(scrape),
        )  # fmt: skip
    changed = {"kubeconfig_path": kubeconfig, "dcgm_scrape_urls": list(scrape)}
    changed = {k: v for k, v in changed.items() if getattr(cluster, k) != v}
    if changed:
        for key, value in changed.items():
            setattr(cluster, key, value)
        cluster.save(update_fields=list(changed))
    return cluster
