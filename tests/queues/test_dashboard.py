"""The fleet dashboard: pool figures, fragmentation, team use, calculator, query count."""

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from fleet.models import Node
from queues.models import Job, Quota
from queues.selectors.dashboard import fleet_dashboard
from tests.factories import ClusterFactory, NodeFactory, NodePoolFactory, QuotaFactory
from tests.queues.builders import make_pool


def _job(quota_world, team, state, workers, per_worker, pool):
    return Job.objects.create(
        team=quota_world[team],
        owner=quota_world["alice"],
        name=f"{team}-{state}",
        image="x",
        tier=quota_world["tiers"]["experiment"],
        max_runtime_seconds=60,
        state=state,
        workers=workers,
        gpus_per_worker=per_worker,
        pool=pool,
    )


def test_dashboard_figures(quota_world):
    a100 = quota_world["a100"]
    # Node 0: 8 allocatable, 6 allocated (2 free); node 1: 8, 3 allocated (5 free).
    Node.objects.filter(name="a100-node-0").update(gpu_allocated=6)
    Node.objects.filter(name="a100-node-1").update(gpu_allocated=3)
    # vision (nominal 8 in a100) runs 10 GPUs: borrows 2 from nlp (nominal 4, idle).
    _job(quota_world, "vision", "running", 2, 5, a100)
    # A waiting job needs 4 GPUs per worker: the 2-GPU block is stranded, the 5 is not.
    _job(quota_world, "nlp", "queued", 1, 4, a100)
    data = fleet_dashboard(user=quota_world["admin"])
    pool = next(p for p in data["pools"] if p["pool"] == a100)
    assert pool["gpus_total"] == 16 and pool["gpus_allocated"] == 9 and pool["gpus_free"] == 7
    assert pool["largest_free_block"] == 5
    assert pool["stranded"] == 2
    assert pool["quota_granted"] == 12
    research = next(d for d in data["departments"] if d["department"] == quota_world["research"])
    teams = {row["team"].slug: row for row in research["teams"]}
    assert teams["vision"]["in_use"] == 10 and teams["vision"]["borrowed"] == 2
    assert teams["nlp"]["lent"] == 2
    calc = data["calculator"]
    assert calc["total"] == 24  # 16 a100 + 8 l4
    assert calc["effective"] == 9
    assert calc["wasted"] == 15 and calc["stranded"] == 2
    assert calc["utilisation_pct"] == 37.5
    assert calc["scheduling_efficiency_pct"] == pytest.approx(71.4)  # 10 of 14 GPUs


def test_dashboard_page_and_scoping(quota_world, client):
    client.force_login(quota_world["pablo"])
    page = client.get(reverse("fleet-dashboard")).content.decode()
    assert 'data-testid="pool-a100"' in page
    assert 'data-testid="team-recsys"' in page
    assert 'data-testid="team-vision"' not in page  # another department's team


def test_dashboard_query_count_does_not_grow(quota_world, client):
    client.force_login(quota_world["admin"])

    def count():
        with CaptureQueriesContext(connection) as ctx:
            assert client.get(reverse("fleet-dashboard")).status_code == 200
        return len(ctx.captured_queries)

    before = count()
    extra = make_pool(quota_world["cluster"], "h100", gpu="NVIDIA H100", nodes=3)
    Quota.objects.create(team=quota_world["recsys"], pool=extra, nominal_gpus=8)
    for state in ("running", "queued", "admitted"):
        _job(quota_world, "recsys", state, 1, 2, extra)
    assert count() == before


@pytest.mark.django_db(transaction=True)
def test_the_dashboard_reads_one_snapshot_and_says_how_old_each_source_is(world, client):
    """Outside a test's transaction, every figure is read in one repeatable-read transaction
    (one snapshot); the page says when the nodes were last synced."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from fleet.models import Cluster

    synced = timezone.now().replace(microsecond=0)
    Cluster.objects.create(name="c1", kubeconfig_path="/dev/null", last_sync_at=synced)
    client.force_login(world["admin"])
    with CaptureQueriesContext(connection) as ctx:
        page = client.get("/dashboard/").content.decode()
    sql = [q["sql"] for q in ctx.captured_queries]
    first = next(i for i, q in enumerate(sql) if "REPEATABLE READ" in q)
    assert "queues_job" not in " ".join(sql[:first])  # the figures come after the snapshot
    assert f"inventory sync at {timezone.localtime(synced):%H:%M:%S} UTC" in page


def test_the_dashboard_shows_each_clusters_gpus_and_the_fleet_total(world, client):
    for name, gpus, granted in (("east", 8, 6), ("west", 4, 2)):
        pool = NodePoolFactory(cluster=ClusterFactory(name=name), name=f"{name}-a100")
        NodeFactory(pool=pool, gpu_capacity=gpus, gpu_allocatable=gpus, gpu_allocated=1)
        QuotaFactory(team=world["vision"], pool=pool, nominal_gpus=granted)
    client.force_login(world["maria"])
    page = client.get("/dashboard/").content.decode()
    cells = re.findall(r'data-testid="cluster-(\w+)">\s*<td>\w+</td>\s*((?:<td class="num">\d+'
                       r'</td>){4})', page)  # fmt: skip
    figures = {name: re.findall(r">(\d+)<", row) for name, row in cells}
    assert figures == {"east": ["8", "1", "7", "6"], "west": ["4", "1", "3", "2"]}
    total = re.search(r'data-testid="cluster-total">.*?</tr>', page, re.S).group(0)
    assert re.findall(r'class="num">(\d+)<', total) == ["12", "2", "10", "8"]
