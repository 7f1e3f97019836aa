"""Every fleet list page and list endpoint runs a fixed number of queries, however many rows."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from tests.factories import ClusterFactory, GpuModelFactory, NodeFactory, NodePoolFactory

# (who asks, URL: a literal API path, or (URL name, args) of a page; "POOL" is the grown pool)
PAGES_AND_ENDPOINTS = [
    ("admin", "/api/v1/clusters/"),
    ("admin", "/api/v1/pools/"),
    ("alice", "/api/v1/pools/"),
    ("admin", "/api/v1/nodes/"),
    ("alice", "/api/v1/gpu-models/"),
    ("admin", ("fleet-overview", [])),
    ("admin", ("fleet-pool-nodes", ["POOL"])),
]


def _grow(pool, first: int, count: int) -> None:
    """More clusters, models, pools and nodes, and more nodes in `pool`."""
    for i in range(first, first + count):
        cluster = ClusterFactory(name=f"grow-{i}")
        grown = NodePoolFactory(cluster=cluster, gpu_model=GpuModelFactory(name=f"GROW-{i}"))
        NodeFactory(pool=grown)
        NodeFactory(pool=pool, name=f"{pool.name}-grow-{i}")


def _queries(client, url) -> int:
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url)
    assert response.status_code == 200, response.content[:500]
    return len(ctx)


@pytest.mark.parametrize("who, where", PAGES_AND_ENDPOINTS)
def test_query_count_does_not_grow_with_rows(world, client, who, where):
    pool = NodePoolFactory(name="watched")
    client.force_login(world[who])
    if isinstance(where, str):
        url = where
    else:
        url = reverse(where[0], args=[pool.pk if a == "POOL" else a for a in where[1]])
    _grow(pool, 0, 2)
    before = _queries(client, url)
    _grow(pool, 2, 8)
    after = _queries(client, url)
    assert after == before, f"{url}: {before} queries with few rows, {after} with more"
