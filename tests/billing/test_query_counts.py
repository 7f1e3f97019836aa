"""Every billing list page and endpoint runs a fixed number of queries, however many rows."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from billing.periods import month_start
from tests.billing.conftest import make_job, make_price
from tests.factories import (
    BudgetFactory,
    NodePoolFactory,
    ReservationFactory,
    TeamFactory,
    UsageHourFactory,
)

USAGE_OCTOBER = {"team": "vision", "start": "2026-10-01T00:00:00Z", "end": "2026-11-01T00:00:00Z"}

# (who asks, URL name, URL args, query string)
PAGES_AND_ENDPOINTS = [
    ("frank", "billing-report", ["2026-10"], {}),
    ("alice", "billing-report", ["2026-10"], {}),
    ("frank", "billing-export", ["2026-10", "csv"], {}),
    ("frank", "billing-team", ["vision"], {}),
    ("frank", "billing-prices", [], {}),
    ("frank", "billing-budgets", [], {}),
    ("frank", "billing-api-report", ["2026-10"], {}),
    ("frank", "billing-api-report", ["2026-10"], {"format": "csv"}),
    ("alice", "billing-api-report", ["2026-10"], {}),
    ("alice", "billing-api-usage", [], USAGE_OCTOBER),
    ("frank", "billing-price-list", [], {}),
    ("frank", "billing-budget-list", [], {}),
]


def _grow(w, first: int, count: int) -> None:
    """More of every row the pages list: teams with jobs, usage, budgets; vision's jobs; prices."""
    now_month = month_start(timezone.now())
    months = {date(2026, 10, 1), now_month}  # October's report, this month's team page
    for i in range(first, first + count):
        team = TeamFactory(slug=f"grow-{i}", department=w["product"])
        for owner_team in (team, w["vision"]):
            job = make_job(owner_team, w["admin"], name=f"j{i}", pod=f"{owner_team.slug}-p{i}")
            for month in months:
                hour = datetime.combine(month, time(), tzinfo=UTC) + timedelta(days=24, hours=i)
                UsageHourFactory(cluster=w["cluster"], hour=hour, gpu_uuid=f"GPU-{i}",
                                 pod=job.pods.get().name, team=owner_team, job=job,
                                 gpu_model=w["l4"])  # fmt: skip
        for month in months:
            BudgetFactory(team=team, month=month)
        make_price(w["l4"], "1", datetime(2000 + i, 1, 1, tzinfo=UTC),
                   datetime(2000 + i, 6, 1, tzinfo=UTC), profile=f"{i}g.10gb")  # fmt: skip
        # A reservation held in October by each team (a line each on the report).
        pool = NodePoolFactory(cluster=w["cluster"], gpu_model=w["l4"], name=f"grow-pool-{i}")
        held = datetime(2026, 10, 10, tzinfo=UTC) + timedelta(hours=i)
        for owner_team in (team, w["vision"]):
            ReservationFactory(team=owner_team, pool=pool, requested_by=w["admin"],
                               starts_at=held, ends_at=held + timedelta(hours=3), state="ended",
                               activated_at=held)  # fmt: skip


def _queries(client, url, params) -> int:
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url, params)
    assert response.status_code == 200, response.content[:500]
    return len(ctx)


@pytest.mark.parametrize("who, name, args, params", PAGES_AND_ENDPOINTS)
def test_query_count_does_not_grow_with_rows(october, client, who, name, args, params):
    client.force_login(october[who])
    url = reverse(name, args=args)
    _grow(october, 0, 2)
    before = _queries(client, url, params)
    _grow(october, 2, 12)
    after = _queries(client, url, params)
    assert after == before
    # The report's sections read a query each (the reservations' since #35).
    assert after <= 31
