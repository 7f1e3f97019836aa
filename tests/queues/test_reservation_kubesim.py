"""A reservation in kubesim (whose Kueue is kueuemodel, as the real one): the lead time keeps
another team from borrowing the reserving team's GPUs, the window gives the team the reserved
GPUs, which nobody else can borrow, and the end gives the pool back."""

from __future__ import annotations

import datetime as dt

from django.core.exceptions import ValidationError
from django.utils import timezone

from fleet import kube
from queues.models import Job, Quota, Reservation
from queues.services import reservations as services
from queues.services.jobs.apply import job_apply
from queues.services.jobs.sync import jobs_sync_cluster
from queues.services.reconcile import cluster_reconcile
from tests.queues.builders import submit, sync_until

HOUR = dt.timedelta(hours=1)


def _l4_gpu(cluster, team):
    cq = kube.client_for(cluster).get("kueue.x-k8s.io/v1beta2", "ClusterQueue", f"qm-{team}")
    flavor = next(
        f for g in cq["spec"]["resourceGroups"] for f in g["flavors"] if f["name"] == "l4"
    )
    gpu = next(r for r in flavor["resources"] if r["name"] == "nvidia.com/gpu")
    return {k: str(v) for k, v in gpu.items() if k != "name"}


def _settled(sim_jobs, *jobs):
    sim_jobs["sim"].sim.settle()
    jobs_sync_cluster(cluster=sim_jobs["cluster"])
    for job in jobs:
        job.refresh_from_db()


def _refusal(w) -> str:
    try:
        submit(w, user="carol", team="nlp", name="refused", pool="l4", gpus_per_worker=2)
    except ValidationError as exc:
        return " ".join(exc.messages)
    return ""


def test_a_reservation_in_kubesim(sim_jobs):
    w = sim_jobs
    cluster, l4 = w["cluster"], w["pools"]["l4"]
    # nlp may borrow in l4 (no quota of its own); vision has 4 of the pool's 8 GPUs.
    Quota.objects.create(team=w["nlp"], pool=l4, nominal_gpus=0, borrowing_limit=None)
    start = timezone.now() + dt.timedelta(days=1)
    r = services.reservation_request(actor=w["bob"], team=w["vision"], pool=l4, gpus=4,
                                     starts_at=start, ends_at=start + 6 * HOUR,
                                     reason="deadline")  # fmt: skip
    services.reservation_approve(reservation=r, approver=w["maria"])

    # Before the lead time: vision runs 4 GPUs, nlp's 2-GPU job waits for them to be idle.
    first = submit(w, name="first", pool="l4", gpus_per_worker=4, expected_runtime_seconds=20)
    job_apply(job_id=first.pk)
    first = sync_until(first, Job.State.RUNNING)
    borrower = submit(w, user="carol", team="nlp", name="borrow", pool="l4", gpus_per_worker=2)
    job_apply(job_id=borrower.pk)
    borrower = sync_until(borrower, Job.State.QUEUED)
    assert borrower.state == Job.State.QUEUED

    # The lead time: vision lends none of its 4, so when its job ends nlp's cannot borrow them.
    services.reservations_advance(now=start - dt.timedelta(minutes=30))
    cluster_reconcile(cluster_id=cluster.pk)
    assert _l4_gpu(cluster, "vision") == {
        "nominalQuota": "4", "borrowingLimit": "0", "lendingLimit": "0"}  # fmt: skip
    first = sync_until(first, Job.State.SUCCEEDED, timeout=60)
    assert first.state == Job.State.SUCCEEDED
    _settled(w, borrower)
    assert borrower.state == Job.State.QUEUED
    # And the portal says so before anyone submits: nothing to borrow in l4 now.
    assert "at most 0 in l4" in _refusal(w)

    # The window: vision's 8, of which 4 (its own) may be lent: nlp's job is admitted with
    # them; vision's 4-GPU job and 4 more fit beside it only because the reserved 4 are kept.
    services.reservations_advance(now=start)
    cluster_reconcile(cluster_id=cluster.pk)
    assert _l4_gpu(cluster, "vision") == {
        "nominalQuota": "8", "borrowingLimit": "0", "lendingLimit": "4"}  # fmt: skip
    borrower = sync_until(borrower, Job.State.RUNNING)
    assert borrower.state == Job.State.RUNNING
    # A second borrower would need the reserved GPUs: it waits.
    second = submit(w, user="carol", team="nlp", name="more", pool="l4", workers=2,
                    gpus_per_worker=2)  # fmt: skip
    job_apply(job_id=second.pk)
    second = sync_until(second, Job.State.QUEUED)
    _settled(w, second)
    assert second.state == Job.State.QUEUED
    # vision runs on its reserved GPUs at once (4 of them, beside nlp's 2 borrowed).
    mine = submit(w, name="deadline", pool="l4", workers=1, gpus_per_worker=4)
    job_apply(job_id=mine.pk)
    mine = sync_until(mine, Job.State.RUNNING)
    assert mine.state == Job.State.RUNNING

    # The end: vision's quota alone again, lending all of it.
    services.reservations_advance(now=start + 6 * HOUR)
    cluster_reconcile(cluster_id=cluster.pk)
    assert _l4_gpu(cluster, "vision") == {"nominalQuota": "4", "borrowingLimit": "0"}
    assert Reservation.objects.get(pk=r.pk).state == Reservation.State.ENDED
