"""Database fixtures for the governance tests: a cluster row, pools, tiers and quotas."""

from fleet.models import Cluster, GpuModel, Node, NodePool
from queues.models import PriorityTier, Quota


def make_cluster(
    name="sim", scheduler="kueue", kueue_api_version="v1beta2", kubeconfig="/dev/null"
):
    return Cluster.objects.create(
        name=name,
        kubeconfig_path=kubeconfig,
        scheduler=scheduler,
        kueue_api_version=kueue_api_version,
    )


def make_pool(cluster, name, *, gpu="NVIDIA A100-SXM4-80GB", nodes=2, gpus_per_node=8, **kw):
    model, _ = GpuModel.objects.get_or_create(name=gpu, defaults={"product_labels": [gpu]})
    pool = NodePool.objects.create(
        cluster=cluster,
        name=name,
        gpu_model=model,
        node_selector=kw.pop("node_selector", {"accelerator": name}),
        taints=kw.pop(
            "taints", [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
        ),
        **kw,
    )
    for i in range(nodes):
        Node.objects.create(
            cluster=cluster,
            name=f"{name}-node-{i}",
            pool=pool,
            gpu_model=model,
            gpu_capacity=gpus_per_node,
            gpu_allocatable=gpus_per_node,
        )
    return pool


def make_tiers():
    return [
        PriorityTier.objects.create(name="production", value=1000, preemptible=False),
        PriorityTier.objects.create(name="experiment", value=100, is_default=True),
    ]


def gov_world(world):
    """The tenancy world plus a Kueue cluster with pools a100 (16 GPUs) and l4 (8 GPUs)."""
    cluster = make_cluster()
    a100 = make_pool(cluster, "a100")
    l4 = make_pool(cluster, "l4", gpu="NVIDIA L4", nodes=2, gpus_per_node=4)
    tiers = make_tiers()
    Quota.objects.create(
        team=world["vision"], pool=a100, nominal_gpus=8, borrowing_limit=4, lending_limit=2
    )
    Quota.objects.create(team=world["vision"], pool=l4, nominal_gpus=2)
    Quota.objects.create(team=world["nlp"], pool=a100, nominal_gpus=4)
    return {**world, "cluster": cluster, "a100": a100, "l4": l4, "tiers": tiers}
