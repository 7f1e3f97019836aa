"""Every queues list page and list endpoint runs a fixed number of queries, however many rows."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from queues.models import Job
from tests.factories import (
    ApiTokenFactory,
    AuditEventFactory,
    JobFactory,
    JobPodFactory,
    JobTransitionFactory,
    ManagedObjectFactory,
    MembershipFactory,
    NodeFactory,
    NodePoolFactory,
    PriorityTierFactory,
    QuotaFactory,
    QuotaRequestFactory,
    ReservationFactory,
    TeamFactory,
    UserFactory,
)

# (who asks, URL: a literal API path or (URL name, args) of a page)
PAGES_AND_ENDPOINTS = [
    ("admin", "/api/v1/departments/"),
    ("admin", "/api/v1/teams/"),
    ("maria", "/api/v1/teams/"),
    ("admin", "/api/v1/memberships/"),
    ("alice", "/api/v1/tokens/"),
    ("admin", "/api/v1/quota-requests/"),
    ("maria", "/api/v1/quota-requests/"),
    ("admin", "/api/v1/quotas/"),
    ("admin", "/api/v1/tiers/"),
    ("admin", "/api/v1/audit-events/"),
    ("maria", "/api/v1/audit-events/"),
    ("alice", "/api/v1/jobs/"),
    ("admin", "/api/v1/jobs/"),
    ("alice", ("home", [])),
    ("maria", ("home", [])),
    ("admin", ("team-list", [])),
    ("admin", ("team-detail", ["vision"])),
    ("alice", ("profile", [])),
    ("alice", ("job-list", [])),
    ("alice", ("job-team-list", ["vision"])),
    ("alice", ("job-queue", ["vision"])),
    ("alice", ("quota-overview", [])),
    ("maria", ("quota-decisions", [])),
    ("admin", ("quota-audit", [])),
    ("admin", ("quota-objects", [])),
    ("admin", ("quota-tiers", [])),
    ("admin", ("fleet-dashboard", [])),
    ("alice", ("fleet-dashboard", [])),
    ("alice", "/api/v1/reservations/"),
    ("admin", "/api/v1/reservations/"),
    ("alice", ("quota-reservations", [])),
    ("maria", ("quota-reservations", [])),
    ("admin", ("quota-reservations", [])),
]


def _grow(w, first: int, count: int) -> None:
    """More of every row these pages list, in the teams the askers see."""
    for i in range(first, first + count):
        team = TeamFactory(slug=f"grow-{i}", department=w["research"])
        user = UserFactory(username=f"grower-{i}")
        MembershipFactory(user=user, team=team)
        MembershipFactory(user=user, team=w["vision"])
        pool = NodePoolFactory(cluster=w["cluster"], name=f"grow-pool-{i}")
        NodeFactory(pool=pool)
        QuotaFactory(team=w["vision"], pool=pool)
        QuotaFactory(team=team, pool=pool)
        QuotaRequestFactory(team=w["vision"], pool=pool, requested_by=w["alice"])
        QuotaRequestFactory(team=team, pool=pool, requested_by=user)
        ReservationFactory(team=w["vision"], pool=pool, requested_by=w["bob"])
        ReservationFactory(team=team, pool=pool, requested_by=user, state="approved")
        ApiTokenFactory(user=w["alice"])
        AuditEventFactory(actor=user, team=w["vision"])
        ManagedObjectFactory(cluster=w["cluster"])
        tier = PriorityTierFactory(name=f"grow-tier-{i}")
        for state in (Job.State.QUEUED, Job.State.RUNNING, Job.State.SUCCEEDED):
            job = JobFactory(
                team=w["vision"], owner=w["alice"], tier=tier, pool=pool, state=state,
                cluster=w["cluster"], queue_position=i if state == Job.State.QUEUED else None,
            )  # fmt: skip
            JobPodFactory(job=job)
            JobTransitionFactory(job=job)


def _queries(client, url) -> int:
    cache.clear()  # both counts from a cold cache (what a page keeps a while is read again)
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url)
    assert response.status_code == 200, response.content[:500]
    return len(ctx)


@pytest.mark.parametrize("who, where", PAGES_AND_ENDPOINTS)
def test_query_count_does_not_grow_with_rows(quota_world, client, who, where):
    client.force_login(quota_world[who])
    url = where if isinstance(where, str) else reverse(where[0], args=where[1])
    _grow(quota_world, 0, 2)
    before = _queries(client, url)
    _grow(quota_world, 2, 8)
    after = _queries(client, url)
    assert after == before, f"{url}: {before} queries with few rows, {after} with more"
