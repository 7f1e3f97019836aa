"""The demo fleet seed matches kubesim's demo fleet file."""

from demo.fleet import NODES, seed_fleet
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
    assert Cluster.objects.get(is_default=True) == first
    assert first.kubeconfig_path == settings.KUBECONFIG and first.scheduler == "kueue"
    assert sorted(first.pools.values_list("name", flat=True)) == [
        "a100", "a100-mig", "h100", "l4", "l4-shared", "l4-spot",
    ]  # fmt: skip
    assert GpuModel.objects.count() == 4
    # The second cluster, on Volcano, where kubesim-lab writes its kubeconfig, scraped there.
    lab = Cluster.objects.get(name="lab")
    assert (lab.scheduler, lab.is_default) == ("volcano", False)
    assert lab.kubeconfig_path == str(settings.VAR_DIR / "kubesim-lab" / "kubeconfig")
    assert lab.dcgm_scrape_urls == [f"http://127.0.0.1:{settings.KUBESIM_LAB_PORT}/metrics/dcgm"]
    assert list(lab.pools.values_list("name", flat=True)) == ["l40s"]
    # MIG, time-sliced and spot pools count their units from the start (the sync agrees).
    pools = {p.name: p for p in first.pools.all()}
    assert (pools["a100-mig"].sharing, pools["a100-mig"].mig_profile) == ("mig", "1g.10gb")
    assert pools["a100-mig"].gpu_resource == "nvidia.com/mig-1g.10gb"
    assert pools["l4-shared"].sharing == "time-slicing"
    spot = pools["l4-spot"]
    assert spot.capacity_type == "spot"
    assert {"key": "cloud.google.com/gke-spot", "value": "true", "effect": "NoSchedule"} in (
        spot.taints
    )
    assert all(t["key"] != "cloud.google.com/gke-spot" for t in spot.tolerations)


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
    assert Node.objects.count() == 14
    pools = NodePool.objects.filter(cluster=cluster)
    stats = pool_stats(pools=pools)
    by_name = {p.name: stats[p.pk] for p in pools}
    assert {name: s["gpus_total"] for name, s in by_name.items()} == {
        "a100": 32, "h100": 16, "l4": 16, "a100-mig": 56, "l4-shared": 16, "l4-spot": 8,
    }  # fmt: skip
    for node in Node.objects.select_related("pool"):
        assert node.gpu_model_id == node.pool.gpu_model_id, node.name
    # The demo's history ran on these nodes (demo.fleet.NODES), in these units.
    for pool in pools:
        nodes = list(pool.nodes.values_list("gpu_capacity", flat=True))
        assert (len(nodes), max(nodes)) == NODES[pool.name], pool.name
    # The sync reads the sharing modes the seed gave the pools: nothing changes.
    assert {(p.name, p.sharing) for p in NodePool.objects.filter(cluster=cluster)} == {
        ("a100", "none"), ("h100", "none"), ("l4", "none"), ("a100-mig", "mig"),
        ("l4-shared", "time-slicing"), ("l4-spot", "none"),
    }  # fmt: skip


def test_the_lab_cluster_pools_select_its_nodes(db, settings):
    with running_kubesim(
        fleet=REPO_ROOT / "kubesim" / "fleets" / "demo-lab.yaml", crds_dir=CRDS_DIR,
        controllers=False,
    ) as sim:  # fmt: skip
        seed_fleet()
        lab = Cluster.objects.get(name="lab")
        Cluster.objects.filter(pk=lab.pk).update(kubeconfig_path=sim.kubeconfig)
        lab.refresh_from_db()
        try:
            result = cluster_sync_inventory(cluster=lab)
        finally:
            kube.clear_client_cache()
    assert result.error == "" and result.unpooled == 0 and result.gpu_models_created == []
    (pool,) = lab.pools.all()
    nodes = list(pool.nodes.values_list("gpu_capacity", flat=True))
    assert (len(nodes), max(nodes)) == NODES["l40s"]
    assert {n.gpu_model.name for n in pool.nodes.select_related("gpu_model")} == {"L40S"}
