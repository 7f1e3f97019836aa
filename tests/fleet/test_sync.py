"""Inventory sync against kubesim through the real client."""

import pytest

from fleet import kube
from fleet.models import Cluster, GpuModel, Node
from fleet.selectors.inventory import pool_stats
from fleet.services.inventory import cluster_sync_inventory


def _gpu_pod(name, node, gpus, phase="Running"):
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": node,
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                }
            ],
        },
    }


def test_sync_creates_nodes_matched_to_pools(sim_cluster):
    result = cluster_sync_inventory(cluster=sim_cluster.cluster)

    assert result.error == ""
    assert result.nodes == 5 and result.created == 5 and result.unpooled == 1
    nodes = {n.name: n for n in Node.objects.select_related("pool", "gpu_model")}
    a100 = nodes["a100-node-0"]
    assert a100.pool == sim_cluster.pools["a100"]
    assert a100.gpu_model.name == "A100-SXM4-80GB"
    assert (a100.gpu_capacity, a100.gpu_allocatable, a100.gpu_allocated) == (8, 8, 0)
    assert a100.labels["accelerator"] == "nvidia-a100-80gb"
    assert a100.taints == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    assert a100.ready and not a100.unschedulable
    assert nodes["l4-node-1"].pool == sim_cluster.pools["l4"]
    assert nodes["spare-node-0"].pool is None
    cluster = Cluster.objects.get(pk=sim_cluster.cluster.pk)
    assert cluster.last_sync_at is not None and cluster.last_sync_error == ""


def test_sync_creates_gpu_model_for_unknown_product(sim_cluster):
    assert not GpuModel.objects.filter(name="Tesla-T4").exists()

    result = cluster_sync_inventory(cluster=sim_cluster.cluster)

    t4 = GpuModel.objects.get(name="Tesla-T4")
    assert t4.product_labels == ["Tesla-T4"]
    assert result.gpu_models_created == ["Tesla-T4"]
    assert Node.objects.get(name="spare-node-0").gpu_model == t4
    # A second sync reuses it.
    assert cluster_sync_inventory(cluster=sim_cluster.cluster).gpu_models_created == []


def test_sync_sees_cordoned_node_and_removes_vanished_node(sim_cluster_synced):
    kube_client = sim_cluster_synced.kube
    kube_client.patch("v1", "Node", "l4-node-0", {"spec": {"unschedulable": True}})
    kube_client.delete("v1", "Node", "l4-node-1")

    result = sim_cluster_synced.sync()

    assert result.removed == 1
    assert Node.objects.get(name="l4-node-0").unschedulable is True
    assert not Node.objects.filter(name="l4-node-1").exists()
    stats = pool_stats(pools=[sim_cluster_synced.pools["l4"]])[sim_cluster_synced.pools["l4"].pk]
    assert stats["nodes"] == 1 and stats["cordoned_nodes"] == 1
    assert stats["gpus_free"] == 0  # a cordoned node's GPUs take no new work


def test_sync_counts_gpus_of_bound_pods(sim_cluster_synced):
    kube_client = sim_cluster_synced.kube
    kube_client.apply(_gpu_pod("train-1", "a100-node-0", 3))
    kube_client.apply(_gpu_pod("train-2", "a100-node-0", 2))
    kube_client.apply(_gpu_pod("train-3", "a100-node-1", 8))

    sim_cluster_synced.sync()

    allocated = dict(Node.objects.values_list("name", "gpu_allocated"))
    assert allocated["a100-node-0"] == 5
    assert allocated["a100-node-1"] == 8
    pool = sim_cluster_synced.pools["a100"]
    stats = pool_stats(pools=[pool])[pool.pk]
    assert stats["gpus_total"] == 16 and stats["gpus_allocated"] == 13
    assert stats["gpus_free"] == 3
    assert stats["free_blocks"] == [3, 0]
    assert stats["largest_free_block"] == 3


def test_sync_records_permanent_error(sim_cluster, tmp_path):
    cluster = sim_cluster.cluster
    broken = tmp_path / "kubeconfig"
    broken.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\n")
    Cluster.objects.filter(pk=cluster.pk).update(kubeconfig_path=str(broken))
    cluster.refresh_from_db()

    result = cluster_sync_inventory(cluster=cluster)

    assert result.error
    cluster.refresh_from_db()
    assert "configuration" in cluster.last_sync_error


def test_sync_transient_error_is_stored_and_raised(sim_cluster, settings):
    settings.KUBE_MAX_ATTEMPTS = 1
    sim_cluster.sim.cluster.server.stop()

    with pytest.raises(kube.TransientError):
        cluster_sync_inventory(cluster=sim_cluster.cluster)

    sim_cluster.cluster.refresh_from_db()
    assert "cannot reach" in sim_cluster.cluster.last_sync_error


def test_in_cluster_outside_a_pod_is_a_stored_configuration_error(db):
    cluster = Cluster.objects.create(name="inside", in_cluster=True)

    result = cluster_sync_inventory(cluster=cluster)

    cluster.refresh_from_db()
    assert "Cannot load the cluster configuration" in cluster.last_sync_error
    assert result.error == cluster.last_sync_error and cluster.last_sync_at is None
