"""Fleet REST API: who may do what, field errors, figures, query counts."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from fleet.models import Cluster, Node, NodePool

pytestmark = pytest.mark.django_db


def test_researcher_lists_pools_with_free_gpus(api_as, world, fleet):
    response = api_as(world["alice"]).get(reverse("pool-list"))

    assert response.status_code == 200
    pools = {p["name"]: p for p in response.json()["results"]}
    a100 = pools["a100"]
    assert a100["cluster"] == "prod" and a100["gpu_model"] == "A100-SXM4-80GB"
    assert a100["gpus"] == 24 and a100["nodes"] == 3 and a100["cordoned_nodes"] == 1
    # Node 0 is full, node 1 has 5 free, node 2 is cordoned: 5 free in one block.
    assert a100["gpus_free"] == 5 and a100["largest_free_block"] == 5
    assert pools["l4"]["gpus_free"] == 4
    assert {"node_selector", "tolerations", "capacity_type", "interconnect"} <= set(a100)


def test_pool_retrieve(api_as, world, fleet):
    pool = fleet["pools"]["l4"]
    response = api_as(world["carol"]).get(reverse("pool-detail", args=[pool.pk]))
    assert response.status_code == 200
    assert response.json()["gpus"] == 4


def test_anonymous_cannot_list_pools(api, fleet):
    assert api.get(reverse("pool-list")).status_code == 401


@pytest.mark.parametrize("who", ["alice", "bob", "maria", "frank"])
def test_non_admins_cannot_touch_clusters_or_nodes(api_as, world, fleet, who, kubeconfig):
    client = api_as(world[who])
    cluster = fleet["cluster"]
    assert client.get(reverse("cluster-list")).status_code == 403
    assert client.get(reverse("node-list")).status_code == 403
    assert client.post(reverse("cluster-sync", args=[cluster.pk])).status_code == 403
    created = client.post(
        reverse("cluster-list"), {"name": "x", "kubeconfig_path": kubeconfig}, format="json"
    )
    assert created.status_code == 403
    pool = client.post(
        reverse("pool-list"),
        {"cluster": "prod", "name": "h100", "gpu_model": "L4", "node_selector": {"a": "b"}},
        format="json",
    )
    assert pool.status_code == 403
    assert Cluster.objects.count() == 1 and NodePool.objects.count() == 2


def test_admin_registers_cluster_and_sync_is_queued_after_commit(
    api_as, world, kubeconfig, django_capture_on_commit_callbacks, queued_syncs
):
    queued = queued_syncs
    client = api_as(world["admin"])
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            reverse("cluster-list"),
            {"name": "gpu-east", "kubeconfig_path": kubeconfig, "context": "prod"},
            format="json",
        )
    assert response.status_code == 201, response.content
    cluster = Cluster.objects.get(name="gpu-east")
    assert cluster.is_default  # the first cluster becomes the default
    assert cluster.kueue_api_version == "v1beta2" and cluster.scheduler == "kueue"
    assert queued == [cluster.pk]

    with django_capture_on_commit_callbacks(execute=True):
        synced = client.post(reverse("cluster-sync", args=[cluster.pk]))
    assert synced.status_code == 202
    assert queued == [cluster.pk, cluster.pk]


def test_cluster_bad_input_gives_field_errors(api_as, world, kubeconfig, tmp_path):
    client = api_as(world["admin"])
    response = client.post(
        reverse("cluster-list"),
        {"name": "Bad_Name", "scheduler": "slurm", "kueue_api_version": "v1alpha9"},
        format="json",
    )
    assert response.status_code == 400
    body = response.json()
    assert set(body) >= {"name", "scheduler", "kueue_api_version"}
    assert "slurm" in body["scheduler"][0]

    missing = client.post(reverse("cluster-list"), {"name": "east"}, format="json")
    assert missing.status_code == 400
    assert "kubeconfig" in missing.json()["kubeconfig_path"][0]

    no_file = client.post(
        reverse("cluster-list"),
        {"name": "east", "kubeconfig_path": str(tmp_path / "nope")},
        format="json",
    )
    assert no_file.status_code == 400 and "No file" in no_file.json()["kubeconfig_path"][0]

    bad_context = client.post(
        reverse("cluster-list"),
        {"name": "east", "kubeconfig_path": kubeconfig, "context": "staging"},
        format="json",
    )
    assert bad_context.status_code == 400 and "prod" in bad_context.json()["context"][0]
    assert not Cluster.objects.exists()


def test_second_default_cluster_moves_the_flag(api_as, world, fleet, kubeconfig):
    response = api_as(world["admin"]).post(
        reverse("cluster-list"),
        {"name": "west", "kubeconfig_path": kubeconfig, "is_default": True},
        format="json",
    )
    assert response.status_code == 201, response.content
    assert list(Cluster.objects.filter(is_default=True).values_list("name", flat=True)) == ["west"]


def test_a_deleted_cluster_leaves_the_api_and_its_unused_pools_go_with_it(
    api_as, world, fleet, monkeypatch, django_capture_on_commit_callbacks
):
    from tests.queues.builders import run_tasks_eagerly

    run_tasks_eagerly(monkeypatch)
    admin = api_as(world["admin"])
    url = reverse("cluster-detail", args=[fleet["cluster"].pk])
    with django_capture_on_commit_callbacks(execute=True):
        assert admin.delete(url).status_code == 204
    assert admin.get(url).status_code == 404
    # Nothing of the past referred to it: the row and its pools are gone.
    assert not Cluster.objects.filter(pk=fleet["cluster"].pk).exists()
    assert not NodePool.objects.filter(cluster_id=fleet["cluster"].pk).exists()


def test_admin_creates_pool_with_tolerations_from_taints(api_as, world, fleet):
    response = api_as(world["admin"]).post(
        reverse("pool-list"),
        {
            "cluster": "prod",
            "name": "a100-spot",
            "gpu_model": "A100-SXM4-80GB",
            "node_selector": {"acc": "a100", "lifecycle": "spot"},
            "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
            "capacity_type": "spot",
            "interconnect": "nvlink",
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    pool = NodePool.objects.get(name="a100-spot")
    assert pool.tolerations == [
        {"key": "nvidia.com/gpu", "effect": "NoSchedule", "operator": "Equal", "value": "present"}
    ]
    assert response.json()["capacity_type"] == "spot"
    # A spot pool carries the spot taint, which only interruptible jobs tolerate.
    assert {"key": "cloud.google.com/gke-spot", "value": "true", "effect": "NoSchedule"} in (
        pool.taints
    )


def test_pool_bad_input_gives_field_errors(api_as, world, fleet):
    client = api_as(world["admin"])
    response = client.post(
        reverse("pool-list"),
        {
            "cluster": "nowhere",
            "name": "A100!",
            "gpu_model": "Voodoo",
            "node_selector": {"acc": 5},
            "capacity_type": "free",
        },
        format="json",
    )
    assert response.status_code == 400
    assert set(response.json()) >= {"cluster", "name", "gpu_model", "capacity_type"}

    structure = client.post(
        reverse("pool-list"),
        {
            "cluster": "prod",
            "name": "x",
            "gpu_model": "L4",
            "node_selector": {"acc": 5},
            "taints": [{"key": "nvidia.com/gpu", "effect": "Sometimes"}],
        },
        format="json",
    )
    assert structure.status_code == 400
    body = structure.json()
    assert "must be a string" in body["node_selector"][0]
    assert "effect" in body["taints"][0]

    duplicate = client.post(
        reverse("pool-list"),
        {"cluster": "prod", "name": "l4", "gpu_model": "L4", "node_selector": {"a": "b"}},
        format="json",
    )
    assert duplicate.status_code == 400 and "already has" in duplicate.json()["name"][0]
    assert NodePool.objects.count() == 2


def test_admin_patches_pool(api_as, world, fleet):
    pool = fleet["pools"]["l4"]
    response = api_as(world["admin"]).patch(
        reverse("pool-detail", args=[pool.pk]), {"capacity_type": "spot"}, format="json"
    )
    assert response.status_code == 200, response.content
    pool.refresh_from_db()
    assert pool.capacity_type == "spot" and pool.node_selector == {"acc": "l4"}
    assert "cloud.google.com/gke-spot" in [t["key"] for t in pool.taints]
    # Back on demand: the spot taint goes, so every job may run there again.
    api_as(world["admin"]).patch(
        reverse("pool-detail", args=[pool.pk]), {"capacity_type": "on-demand"}, format="json"
    )
    pool.refresh_from_db()
    assert "cloud.google.com/gke-spot" not in [t["key"] for t in pool.taints]


@pytest.mark.parametrize(
    "toleration", [{"key": "x\x00y", "operator": "Exists"}, {"key": "k", "value": "a\x00"}]
)
def test_a_toleration_with_nul_is_a_400_that_changes_nothing_not_a_500(
    api_as, world, fleet, toleration
):
    """Found by the schema property tests (#32): PostgreSQL's jsonb cannot hold NUL, and the
    toleration's key and value were saved unchecked."""
    pool = fleet["pools"]["l4"]
    response = api_as(world["admin"]).patch(
        reverse("pool-detail", args=[pool.pk]), {"tolerations": [toleration]}, format="json"
    )
    assert response.status_code == 400, response.content
    assert "Toleration 1" in str(response.json())
    before = pool.tolerations
    pool.refresh_from_db()
    assert pool.tolerations == before


def test_admin_lists_nodes_and_filters_by_pool(api_as, world, fleet):
    client = api_as(world["admin"])
    response = client.get(reverse("node-list"), {"pool": "a100", "cluster": "prod"})
    assert response.status_code == 200
    nodes = response.json()["results"]
    assert [n["name"] for n in nodes] == ["a100-0", "a100-1", "a100-2"]
    assert [n["gpu_free"] for n in nodes] == [0, 5, 0]


def test_pools_filter_by_cluster_and_gpu_model(api_as, world, fleet):
    client = api_as(world["alice"])
    response = client.get(reverse("pool-list"), {"cluster": "prod", "gpu_model": "L4"})
    assert [p["name"] for p in response.json()["results"]] == ["l4"]
    assert client.get(reverse("pool-list"), {"cluster": "other"}).json()["results"] == []


def test_gpu_models_readable_by_everyone(api_as, world, fleet):
    response = api_as(world["alice"]).get(reverse("gpumodel-list"))
    assert response.status_code == 200
    assert [m["name"] for m in response.json()["results"]] == ["A100-SXM4-80GB", "L4"]


def _query_count(client, url):
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(url).status_code == 200
    return len(ctx.captured_queries)


def _more_fleet(fleet, n):
    for i in range(n):
        pool = NodePool.objects.create(
            cluster=fleet["cluster"],
            name=f"extra-{i}",
            gpu_model=fleet["l4"],
            node_selector={"x": str(i)},
        )
        Node.objects.create(cluster=fleet["cluster"], name=f"extra-node-{i}", pool=pool)


@pytest.mark.parametrize("route", ["pool-list", "node-list", "cluster-list", "gpumodel-list"])
def test_list_endpoints_have_constant_query_counts(api_as, world, fleet, route):
    client = api_as(world["admin"])
    url = reverse(route)
    _query_count(client, url)  # warm the session and group caches
    before = _query_count(client, url)
    _more_fleet(fleet, 5)
    assert _query_count(client, url) == before


def test_a_pool_beyond_what_a_resource_flavor_takes_is_refused(api_as, world, fleet):
    """Kueue's ResourceFlavor takes at most 8 node labels, taints and tolerations (its CRD):
    a pool beyond that is refused here with the limit, not accepted and refused later."""
    import yaml

    from tests.fixtures_cluster import CRDS_DIR

    crd = next(
        doc
        for path in (CRDS_DIR / "kueue").glob("*")
        for doc in yaml.safe_load_all(path.read_text())
        if doc
        and doc.get("kind") == "CustomResourceDefinition"
        and doc["spec"]["names"]["kind"] == "ResourceFlavor"
    )
    version = next(v for v in crd["spec"]["versions"] if v.get("storage"))
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    limit = spec["nodeLabels"]["maxProperties"]
    assert limit == 8
    labels = {f"example.com/l{i}": "x" for i in range(limit + 1)}
    body = {"cluster": "prod", "name": "wide", "gpu_model": "A100-SXM4-80GB",
            "node_selector": labels}  # fmt: skip
    answer = api_as(world["admin"]).post(reverse("pool-list"), body, format="json")
    assert answer.status_code == 400
    assert "At most 8 node labels (9 given)" in str(answer.json()["node_selector"])
    assert not NodePool.objects.filter(name="wide").exists()
    body["node_selector"] = dict(list(labels.items())[:limit])
    assert api_as(world["admin"]).post(reverse("pool-list"), body, format="json").status_code == 201


def _offer_mig_profiles(pool, *extra_on_last):
    """The pool's nodes partitioned into 1g.10gb and 3g.40gb instances; the last node offers
    `extra_on_last` profiles too (as GPU feature discovery labels them)."""
    nodes = list(pool.nodes.order_by("name"))
    for node in nodes:
        profiles = {"1g.10gb": 14, "3g.40gb": 4}
        if node is nodes[-1]:
            profiles.update(dict.fromkeys(extra_on_last, 2))
        node.labels = {**(node.labels or {}), **{
            f"nvidia.com/mig-{p}.count": str(n) for p, n in profiles.items()
        }}  # fmt: skip
        node.save(update_fields=["labels"])


def test_a_pools_mig_profile_must_be_one_every_node_offers(api_as, world, fleet):
    """A MIG node may offer several profiles: an admin names the one the pool counts (its
    jobs get instances of that one only); one that not every node offers is refused with the
    profiles they all offer, a field error, not a 500."""
    pool = fleet["pools"]["a100"]
    _offer_mig_profiles(pool, "2g.20gb")
    admin = api_as(world["admin"])
    url = reverse("pool-detail", args=[pool.pk])
    refused = admin.patch(url, {"mig_profile": "2g.20gb"}, format="json")
    assert refused.status_code == 400
    (message,) = refused.json()["mig_profile"]
    assert "Not every node of the pool offers 2g.20gb" in message
    assert "the profiles all of them offer: 1g.10gb, 3g.40gb" in message
    garbled = admin.patch(url, {"mig_profile": "big"}, format="json")
    assert garbled.status_code == 400 and "is not a MIG profile" in str(garbled.json())
    named = admin.patch(url, {"mig_profile": "3g.40gb"}, format="json")
    assert named.status_code == 200, named.json()
    pool.refresh_from_db()
    assert pool.mig_profile == "3g.40gb"
    # A researcher reads what the pool counts, and may not change it.
    shown = api_as(world["alice"]).get(url).json()
    assert shown["mig_profile"] == "3g.40gb"
    assert api_as(world["alice"]).patch(url, {"mig_profile": ""}, format="json").status_code == 403
