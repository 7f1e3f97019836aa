"""The demo fleet seed matches kubesim's demo fleet file."""

from demo.fleet import seed_fleet
from fleet import kube
from fleet.models import Cluster, GpuModel, Node, NodePool
from fleet.selectors.inventory import pool_stats
from fleet.services.inventory import cluster_sync_inventory
from kubesim.testing import running_kubesim
from tests.fixtures_cluster import CRDS_DIR, REPO_ROOT


def test_seed_fleet_is_idempotent(db, settings, tmp_path):
    settings.KUBECONFIG = str(tmp_path / "kubeconfig")
    first = seed_fleet()
    seed_fleet()
    assert Cluster.objects.get() == first
    assert first.is_default and first.kubeconfig_path == settings.KUBECONFIG
    assert sorted(NodePool.objects.values_list("name", flat=True)) == ["a100", "h100", "l4"]
    assert GpuModel.objects.count() == 3


def test_demo_pools_select_every_demo_node(db, settings):
    with running_kubesim(
        fleet=REPO_ROOT / "kubesim" / "fleets" / "demo.yaml", crds_dir=CRDS_DIR, controllers=False
    ) as sim:
        settings.KUBECONFIG = sim.kubeconfig
        cluster = seed_fleet()
        try:
            result = cluster_sync_inventory(cluster=cluster)
        finally:
            kube.clear_client_cache()

    assert result.error == "" and result.unpooled == 0 and result.gpu_models_created == []
    assert Node.objects.count() == 10
    stats = pool_stats(pools=NodePool.objects.all())
    by_name = {p.name: stats[p.pk] for p in NodePool.objects.all()}
    assert {name: s["gpus_total"] for name, s in by_name.items()} == {
        "a100": 32,
        "h100": 16,
        "l4": 16,
    }
    for node in Node.objects.select_related("pool"):
        assert node.gpu_model_id == node.pool.gpu_model_id, node.name
