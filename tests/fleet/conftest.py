"""Fixtures for fleet tests: a kubeconfig file and a small fleet in the database."""

import pytest

from fleet.models import Cluster, GpuModel, Node, NodePool


@pytest.fixture
def kubeconfig(tmp_path):
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: prod, context: {cluster: c, user: u}}]\n"
        "current-context: prod\n"
    )
    return str(path)


@pytest.fixture
def fleet(db, kubeconfig):
    """A cluster with two pools and synced-looking nodes (no kubesim needed)."""
    cluster = Cluster.objects.create(name="prod", kubeconfig_path=kubeconfig, is_default=True)
    a100 = GpuModel.objects.create(name="A100-SXM4-80GB", product_labels=["NVIDIA-A100-SXM4-80GB"])
    l4 = GpuModel.objects.create(name="L4", product_labels=["NVIDIA-L4"])
    pools = {
        "a100": NodePool.objects.create(
            cluster=cluster, name="a100", gpu_model=a100, node_selector={"acc": "a100"}
        ),
        "l4": NodePool.objects.create(
            cluster=cluster, name="l4", gpu_model=l4, node_selector={"acc": "l4"}
        ),
    }
    for i, allocated in enumerate([8, 3, 0]):
        Node.objects.create(
            cluster=cluster,
            name=f"a100-{i}",
            pool=pools["a100"],
            gpu_model=a100,
            gpu_capacity=8,
            gpu_allocatable=8,
            gpu_allocated=allocated,
            unschedulable=(i == 2),
        )
    Node.objects.create(
        cluster=cluster, name="l4-0", pool=pools["l4"], gpu_capacity=4, gpu_allocatable=4
    )
    return {"cluster": cluster, "pools": pools, "a100": a100, "l4": l4}


@pytest.fixture
def queued_syncs(monkeypatch):
    """Inventory syncs the code under test enqueued (cluster ids), instead of sending them."""
    queued = []
    monkeypatch.setattr(
        "fleet.services.clusters.cluster_sync_enqueue",
        lambda *, cluster_id: queued.append(cluster_id),
    )
    return queued
