"""An advance reservation on the real control plane: the ClusterQueue changes the portal
renders for it are accepted by the real Kueue, and keep the other team of the department from
borrowing the reserving team's GPUs in the lead time and the reserved GPUs in the window."""

from __future__ import annotations

import datetime as dt
import time

from django.utils import timezone

from queues.models import Job, ManagedObject
from queues.services import reservations as services

S = Job.State


def _l4_gpu(portal, team) -> dict:
    cq = portal.kueue("clusterqueues", f"qm-{team.slug}")
    flavors = [f for g in cq["spec"]["resourceGroups"] for f in g["flavors"]]
    gpu = next(r for f in flavors if f["name"] == "l4" for r in f["resources"]
               if r["name"] == "nvidia.com/gpu")  # fmt: skip
    return {k: str(v) for k, v in gpu.items() if k != "name"}


def _stays_queued(portal, job, seconds=8.0) -> Job:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        portal.sync()
        job.refresh_from_db()
        assert job.state == S.QUEUED, (job.name, job.state)
        time.sleep(0.5)
    return job


def _phase(portal, now) -> None:
    with portal.committing():
        services.reservations_advance(now=now)
    portal.reconcile()
    rows = ManagedObject.objects.filter(cluster=portal.cluster, kind="ClusterQueue")
    assert not rows.exclude(last_error="").exists(), list(rows.values_list("name", "last_error"))


def test_a_reservation_keeps_the_other_team_from_borrowing_the_reserved_gpus(portal):
    a = portal.teams["a"]
    portal.quota("a", "l4", 4)
    portal.quota("b", "l4", 0, borrowing_limit=None)  # b may only borrow, in l4's 8 GPUs
    portal.reconcile()
    start = timezone.now() + dt.timedelta(days=1)
    with portal.committing():
        r = services.reservation_request(actor=portal.users["a-lead"], team=a,
                                         pool=portal.pools["l4"], gpus=4, starts_at=start,
                                         ends_at=start + dt.timedelta(hours=6),
                                         reason="deadline")  # fmt: skip
        services.reservation_approve(reservation=r, approver=portal.users["manager"])

    # a runs on its 4 GPUs; b's job waits for them to be idle.
    first = portal.submit(name="first", gpus_per_worker=4, run="15s")
    first = portal.sync_until(first, S.RUNNING)
    borrower = portal.submit(team="b", name="borrower", gpus_per_worker=2, run="10m")
    borrower = portal.sync_until(borrower, S.QUEUED)

    # The lead time: a lends nothing; when its job ends, b still cannot borrow.
    _phase(portal, start - dt.timedelta(minutes=30))
    assert _l4_gpu(portal, a) == {"nominalQuota": "4", "lendingLimit": "0"}
    portal.sync_until(first, S.SUCCEEDED, timeout=90)
    _stays_queued(portal, borrower)

    # The window: a's 8, of which its own 4 may be lent (b's 2 are admitted), the reserved
    # 4 not: b's next 4 wait while a runs 4 at once.
    _phase(portal, start)
    assert _l4_gpu(portal, a) == {"nominalQuota": "8", "lendingLimit": "4"}
    portal.sync_until(borrower, S.RUNNING, timeout=90)
    more = portal.submit(team="b", name="more", workers=2, gpus_per_worker=2, run="10m")
    more = portal.sync_until(more, S.QUEUED)
    mine = portal.submit(name="deadline", gpus_per_worker=4, run="10m")
    portal.sync_until(mine, S.RUNNING, timeout=90)
    _stays_queued(portal, more, seconds=5)

    # The end: a's quota alone again.
    _phase(portal, start + dt.timedelta(hours=6))
    assert _l4_gpu(portal, a) == {"nominalQuota": "4"}
