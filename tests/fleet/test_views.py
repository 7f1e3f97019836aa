"""Fleet pages: who sees what, forms with errors, query counts."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from fleet.models import Cluster, GpuModel, Node, NodePool

pytestmark = pytest.mark.django_db


def test_researcher_sees_pools_but_no_clusters(client, world, fleet):
    client.force_login(world["alice"])
    response = client.get(reverse("fleet-overview"))
    assert response.status_code == 200
    html = response.content.decode()
    assert 'data-pool="a100"' in html and 'data-pool="l4"' in html
    assert 'data-testid="clusters"' not in html
    assert "Nodes in no pool" not in html
    assert reverse("fleet-pool-nodes", args=[fleet["pools"]["a100"].pk]) not in html


def test_admin_sees_clusters_errors_and_unpooled_nodes(client, world, fleet):
    Cluster.objects.filter(pk=fleet["cluster"].pk).update(
        last_sync_error="403 Forbidden: nodes is forbidden"
    )
    Node.objects.create(cluster=fleet["cluster"], name="stray-node", gpu_capacity=2)
    client.force_login(world["admin"])
    html = client.get(reverse("fleet-overview")).content.decode()
    assert 'data-testid="clusters"' in html
    assert "nodes is forbidden" in html
    assert "stray-node" in html
    assert "Sync now" in html


@pytest.mark.parametrize("who", ["alice", "maria", "frank"])
def test_non_admins_get_403_on_admin_pages(client, world, fleet, who):
    client.force_login(world[who])
    pool, cluster = fleet["pools"]["a100"], fleet["cluster"]
    for url in [
        reverse("fleet-cluster-create"),
        reverse("fleet-cluster-edit", args=[cluster.pk]),
        reverse("fleet-pool-create"),
        reverse("fleet-pool-edit", args=[pool.pk]),
        reverse("fleet-pool-nodes", args=[pool.pk]),
    ]:
        assert client.get(url).status_code == 403, url
    assert client.post(reverse("fleet-cluster-sync", args=[cluster.pk])).status_code == 403


def test_anonymous_is_sent_to_login(client, fleet):
    response = client.get(reverse("fleet-overview"))
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_cluster_form_shows_field_errors(client, world):
    client.force_login(world["admin"])
    response = client.post(
        reverse("fleet-cluster-create"),
        {"name": "east", "scheduler": "kueue", "kueue_api_version": "v1beta2"},
    )
    assert response.status_code == 200
    assert "Give the kubeconfig path" in response.content.decode()
    bad = client.post(
        reverse("fleet-cluster-create"),
        {"name": "east", "scheduler": "slurm", "kueue_api_version": "v1beta2"},
    )
    assert "slurm is not one of the available choices" in bad.content.decode()
    assert not Cluster.objects.exists()


def test_admin_registers_cluster_through_form(
    client,
    world,
    kubeconfig,
    django_capture_on_commit_callbacks,
    queued_syncs,
):
    queued = queued_syncs
    client.force_login(world["admin"])
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            reverse("fleet-cluster-create"),
            {
                "name": "east",
                "kubeconfig_path": kubeconfig,
                "scheduler": "volcano",
                "kueue_api_version": "v1beta1",
            },
        )
    assert response.status_code == 302
    cluster = Cluster.objects.get(name="east")
    assert cluster.scheduler == "volcano" and queued == [cluster.pk]


def test_admin_defines_pool_through_form(client, world, fleet):
    client.force_login(world["admin"])
    response = client.post(
        reverse("fleet-pool-create"),
        {
            "cluster": fleet["cluster"].pk,
            "name": "h100",
            "gpu_model": fleet["a100"].pk,
            "node_selector": "accelerator=nvidia-h100\nzone=b",
            "taints": "nvidia.com/gpu=present:NoSchedule",
            "capacity_type": "spot",
            "interconnect": "nvlink",
            "sharing": "none",
        },
    )
    assert response.status_code == 302, response.content.decode()
    pool = NodePool.objects.get(name="h100")
    assert pool.node_selector == {"accelerator": "nvidia-h100", "zone": "b"}
    # A spot pool also carries the spot taint, which only interruptible jobs tolerate.
    assert pool.taints == [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
        {"key": "cloud.google.com/gke-spot", "value": "true", "effect": "NoSchedule"},
    ]
    assert [t["key"] for t in pool.tolerations] == ["nvidia.com/gpu"]
    assert pool.tolerations[0]["operator"] == "Equal"


def test_pool_form_errors(client, world, fleet):
    client.force_login(world["admin"])
    response = client.post(
        reverse("fleet-pool-create"),
        {
            "cluster": fleet["cluster"].pk,
            "name": "l4",
            "gpu_model": fleet["l4"].pk,
            "node_selector": "no equals sign",
            "taints": "nvidia.com/gpu=present:Whenever",
            "capacity_type": "on-demand",
            "interconnect": "pcie",
            "sharing": "none",
        },
    )
    html = response.content.decode()
    assert response.status_code == 200
    assert "key=value" in html and "Effect one of" in html
    duplicate = client.post(
        reverse("fleet-pool-create"),
        {
            "cluster": fleet["cluster"].pk,
            "name": "l4",
            "gpu_model": fleet["l4"].pk,
            "node_selector": "a=b",
            "capacity_type": "on-demand",
            "interconnect": "pcie",
            "sharing": "none",
        },
    )
    assert "already has a pool named" in duplicate.content.decode()


def test_admin_edits_pool(client, world, fleet):
    pool = fleet["pools"]["l4"]
    client.force_login(world["admin"])
    page = client.get(reverse("fleet-pool-edit", args=[pool.pk]))
    assert "acc=l4" in page.content.decode()
    response = client.post(
        reverse("fleet-pool-edit", args=[pool.pk]),
        {
            "name": "l4",
            "gpu_model": fleet["l4"].pk,
            "node_selector": "acc=l4\nzone=a",
            "capacity_type": "spot",
            "interconnect": "pcie",
            "sharing": "time-slicing",
        },
    )
    assert response.status_code == 302, response.content.decode()
    pool.refresh_from_db()
    assert pool.node_selector == {"acc": "l4", "zone": "a"} and pool.sharing == "time-slicing"


def test_admin_sees_nodes_of_a_pool(client, world, fleet):
    client.force_login(world["admin"])
    html = client.get(reverse("fleet-pool-nodes", args=[fleet["pools"]["a100"].pk])).content
    html = html.decode()
    assert "a100-0" in html and "a100-2" in html and "cordoned" in html
    assert "l4-0" not in html


def _count(client, url):
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(url).status_code == 200
    return len(ctx.captured_queries)


@pytest.mark.parametrize("page", ["overview", "pool-nodes"])
def test_pages_have_constant_query_counts(client, world, fleet, page):
    client.force_login(world["admin"])
    pool = fleet["pools"]["a100"]
    url = (
        reverse("fleet-overview")
        if page == "overview"
        else reverse("fleet-pool-nodes", args=[pool.pk])
    )
    _count(client, url)
    before = _count(client, url)
    model = GpuModel.objects.create(name="H100")
    for i in range(4):
        extra = NodePool.objects.create(
            cluster=fleet["cluster"], name=f"p{i}", gpu_model=model, node_selector={"p": str(i)}
        )
        Node.objects.create(cluster=fleet["cluster"], name=f"x{i}", pool=extra)
        Node.objects.create(cluster=fleet["cluster"], name=f"y{i}", pool=pool, gpu_model=model)
        Node.objects.create(cluster=fleet["cluster"], name=f"z{i}")
    assert _count(client, url) == before


def test_a_disabled_cluster_announces_no_next_try(client, world, fleet):
    from datetime import timedelta

    from django.utils import timezone

    from fleet.services.clusters import cluster_disable

    now = timezone.now()
    Cluster.objects.filter(pk=fleet["cluster"].pk).update(
        unreachable_since=now - timedelta(minutes=5), retry_at=now + timedelta(minutes=2)
    )
    client.force_login(world["admin"])
    pages = (reverse("fleet-overview"), reverse("fleet-cluster-edit", args=[fleet["cluster"].pk]))
    for url in pages:
        assert "next try at" in client.get(url).content.decode()
    cluster_disable(actor=world["admin"], cluster=fleet["cluster"], reason="maintenance")
    for url in pages:
        html = client.get(url).content.decode()
        assert "next try at" not in html
        assert "Disabled (maintenance): the portal does not try it until it is enabled" in html
