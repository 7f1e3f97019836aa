"""Fixtures that run kubesim and register it as a Cluster (owned by the fleet work).

`sim_cluster` yields a SimCluster: .cluster (the Cluster row, default, Kueue v1beta2), .pools
(NodePool rows by name: "a100" tainted 2x8 GPUs, "l4" 2x4 GPUs), .gpu_models (by name), .sim
(the running kubesim), .kube (fleet.kube's client for the cluster) and .api_client (an official
ApiClient, for white-box checks). The fleet also has one T4 node that no pool selects.
`sim_cluster_synced` is the same after an inventory sync (Node rows exist).
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DIR = Path(os.environ.get("QM_SHARED_DIR", REPO_ROOT.parent / "shared"))
CRDS_DIR = SHARED_DIR / "crds"

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}

SIM_FLEET = {
    "pools": [
        {
            "name": "a100",
            "gpuModel": "NVIDIA A100-SXM4-80GB",
            "nodes": 2,
            "gpusPerNode": 8,
            "labels": {"accelerator": "nvidia-a100-80gb"},
            "taints": [GPU_TAINT],
        },
        {
            "name": "l4",
            "gpuModel": "NVIDIA L4",
            "nodes": 2,
            "gpusPerNode": 4,
            "labels": {"accelerator": "nvidia-l4"},
        },
        # Selected by no NodePool: the fleet page lists it under "nodes in no pool".
        {
            "name": "spare",
            "gpuModel": "Tesla T4",
            "nodes": 1,
            "gpusPerNode": 4,
            "labels": {"accelerator": "nvidia-t4"},
            "taints": [GPU_TAINT],
        },
    ]
}

# name -> (GpuModel fields, NodePool fields)
SIM_POOLS: dict[str, tuple[dict, dict]] = {
    "a100": (
        {
            "name": "A100-SXM4-80GB",
            "memory_mib": 81920,
            "product_labels": ["NVIDIA-A100-SXM4-80GB"],
            "dcgm_model_names": ["NVIDIA A100-SXM4-80GB"],
        },
        {
            "node_selector": {"accelerator": "nvidia-a100-80gb"},
            "taints": [GPU_TAINT],
            "tolerations": [
                {
                    "key": "nvidia.com/gpu",
                    "operator": "Equal",
                    "value": "present",
                    "effect": "NoSchedule",
                }
            ],
            "interconnect": "nvlink",
        },
    ),
    "l4": (
        {
            "name": "L4",
            "memory_mib": 23034,
            "product_labels": ["NVIDIA-L4"],
            "dcgm_model_names": ["NVIDIA L4"],
        },
        {"node_selector": {"accelerator": "nvidia-l4"}, "interconnect": "pcie"},
    ),
}


@dataclass
class SimCluster:
    """A running kubesim registered as a Cluster, with GPU models and node pools."""

    cluster: Any
    pools: dict[str, Any]
    gpu_models: dict[str, Any]
    sim: Any
    kube: Any
    api_client: Any = None
    extra: dict = field(default_factory=dict)

    def sync(self):
        """Run the inventory sync service now (in this process)."""
        from fleet.services.inventory import cluster_sync_inventory

        return cluster_sync_inventory(cluster=self.cluster)


# The kubesims of this test session (kubesim.testing.KubesimPool); None outside pytest (bench).
POOL = None


def pytest_sessionstart(session):
    global POOL
    from kubesim.testing import KubesimPool

    POOL = KubesimPool(crds_dir=CRDS_DIR)


def pytest_sessionfinish(session, exitstatus):
    if POOL is not None:
        POOL.close()


@pytest.fixture(scope="session")
def kubesim_pool():
    """The session's kubesims: `kubesim_pool.checkout(fleet=...)` yields one, reset."""
    return POOL


def kubesim_for_test(**settings):
    """A kubesim for one test: from the session's pool (reset to its fleet) under pytest, else
    a new one. settings: fleet, controllers, time_scale, watch_history."""
    from kubesim.testing import running_kubesim

    if POOL is not None:
        return POOL.checkout(**settings)
    return running_kubesim(crds_dir=CRDS_DIR, **settings)


@contextmanager
def make_sim_cluster(
    *,
    fleet: dict | None = None,
    name: str = "kubesim",
    controllers: bool = True,
    scheduler: str = "kueue",
    kueue_api_version: str = "v1beta2",
    time_scale: float = 1.0,
):
    """A kubesim with the shared CRDs (the session's, reset to `fleet`), registered as a
    Cluster (DB access must be allowed)."""
    from kubernetes import config as k8s_config

    from fleet import kube
    from fleet.models import Cluster, GpuModel, NodePool

    with kubesim_for_test(
        fleet=fleet or SIM_FLEET, controllers=controllers, time_scale=time_scale
    ) as sim:
        cluster = Cluster.objects.create(
            name=name,
            kubeconfig_path=sim.kubeconfig,
            scheduler=scheduler,
            kueue_api_version=kueue_api_version,
            is_default=not Cluster.objects.filter(is_default=True).exists(),
        )
        pools, models = {}, {}
        for pool_name, (model_fields, pool_fields) in SIM_POOLS.items():
            model_fields = dict(model_fields)
            model, _ = GpuModel.objects.get_or_create(
                name=model_fields.pop("name"), defaults=model_fields
            )
            models[model.name] = model
            pools[pool_name] = NodePool.objects.create(
                cluster=cluster, name=pool_name, gpu_model=model, **pool_fields
            )
        api_client = k8s_config.new_client_from_config(sim.kubeconfig)
        try:
            yield SimCluster(
                cluster=cluster,
                pools=pools,
                gpu_models=models,
                sim=sim,
                kube=kube.client_for(cluster),
                api_client=api_client,
            )
        finally:
            api_client.close()
            kube.clear_client_cache()


@pytest.fixture
def sim_cluster(db):
    """kubesim (CRDs, a100/l4 pools and a spare T4 node) registered as the default Cluster."""
    with make_sim_cluster() as sim_cluster:
        yield sim_cluster


@pytest.fixture
def sim_cluster_synced(sim_cluster):
    """sim_cluster after one inventory sync: Node rows exist and are matched to pools."""
    sim_cluster.sync()
    sim_cluster.cluster.refresh_from_db()
    return sim_cluster
