"""Spot capacity from the portal: a spot pool is tainted so that only interruptible jobs fit
(its flavor leaves the toleration out); an interruptible job replaces a reclaimed worker
without counting a failure, and with a checkpoint volume the new worker resumes; the page and
the timeline say so; what cannot work is refused with what to fix."""

import time
from contextlib import contextmanager
from datetime import UTC, date, datetime
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils import timezone

from billing.dcgm import HOUR
from billing.models import UsageHour
from billing.pricing import gpu_hours
from billing.selectors.reports import build_report, usage_summary
from fleet.models.inventory import SPOT_TAINT
from fleet.services.pools import pool_update
from queues.backends import backend_named
from queues.manifests.quotas import resource_flavor_manifest
from queues.models import Job
from queues.services.jobs.apply import job_apply
from queues.services.reconcile import cluster_reconcile
from queues.services.storage import volume_create
from tests.billing.conftest import make_price, scrape_an_hour
from tests.crd_validation import assert_valid_manifest
from tests.fixtures_cluster import SIM_FLEET, make_sim_cluster
from tests.queues.builders import job_world_setup, sim_jobs_setup, submit, sync_until


def _errors(exc):
    return {k: " ".join(v) for k, v in exc.value.message_dict.items()}


@pytest.fixture
def offline(world):
    jw = job_world_setup(world)
    pool_update(actor=world["admin"], pool=jw["pools"]["l4"], capacity_type="spot",
                node_selector={"accelerator": "nvidia-l4"})  # fmt: skip
    return jw


def test_a_spot_pool_is_tainted_and_its_flavor_lets_only_interruptible_jobs_in(offline):
    l4 = offline["pools"]["l4"]
    l4.refresh_from_db()
    assert SPOT_TAINT in l4.taints
    flavor = resource_flavor_manifest(l4)
    assert_valid_manifest(flavor)
    assert {"key": SPOT_TAINT["key"], "value": "true", "effect": "NoSchedule"} in (
        flavor["spec"]["nodeTaints"]
    )
    assert all(t["key"] != SPOT_TAINT["key"] for t in flavor["spec"].get("tolerations", []))


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"pool": "l4"}, "interruptible", "Pool l4 is spot capacity"),
        ({"interruptible": True, "kind": "pytorchjob"}, "interruptible",
         "Interruptible jobs run as the Job kind"),
        ({"checkpoint_path": "/ckpt"}, "checkpoint_volume", "Give the team volume"),
        ({"checkpoint_volume": "nope"}, "checkpoint_volume", "no volume named 'nope'"),
    ],
)  # fmt: skip
def test_spot_choices_that_cannot_work_are_refused(offline, overrides, field, message):
    with pytest.raises(ValidationError) as refused:
        submit(offline, **overrides)
    assert message in _errors(refused)[field]
    assert not Job.objects.exists()


def test_an_interruptible_job_is_rendered_to_survive_a_reclaim(offline):
    job = submit(offline, pool="l4", interruptible=True, gpus_per_worker=1)
    (batch,) = [m for m in backend_named("kueue").job_objects(job) if m["kind"] == "Job"]
    assert_valid_manifest(batch)
    assert batch["spec"]["podFailurePolicy"]["rules"][0] == {
        "action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
    }  # fmt: skip
    tolerations = batch["spec"]["template"]["spec"]["tolerations"]
    assert any(t["key"] == SPOT_TAINT["key"] for t in tolerations)


H = datetime(2026, 10, 5, 10, 0, tzinfo=UTC)
SPOT_FLEET = {
    "pools": [SIM_FLEET["pools"][0],
              {**SIM_FLEET["pools"][1], "nodes": 1, "spot": True}]
}  # fmt: skip


@contextmanager
def spot_sim(world, time_scale=10.0):
    """kubesim with a spot L4 pool (by default ten simulated seconds per real second: a 30 s
    job runs for 3), quotas reconciled, and vision's volume "ckpt" for checkpoints."""
    with make_sim_cluster(fleet=SPOT_FLEET, time_scale=time_scale) as sim:
        pool_update(actor=world["admin"], pool=sim.pools["l4"], capacity_type="spot")
        sim.sync()
        setup = sim_jobs_setup(world, sim)
        volume_create(actor=world["bob"], team=world["vision"], cluster=sim.cluster,
                      name="ckpt", size_gib=1)  # fmt: skip
        cluster_reconcile(cluster_id=sim.cluster.pk)
        yield setup


@pytest.fixture
def sim_spot(world):
    with spot_sim(world) as sim:
        yield sim


def test_a_reclaimed_worker_is_replaced_and_resumes_from_its_checkpoint(sim_spot, client):
    job = submit(sim_spot, name="resumable", pool="l4", gpus_per_worker=1, interruptible=True,
                 checkpoint_volume="ckpt", expected_runtime_seconds=30)  # fmt: skip
    (batch,) = [m for m in backend_named("kueue").job_objects(job) if m["kind"] == "Job"]
    env = batch["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "CHECKPOINT_DIR", "value": "/checkpoints"} in env
    assert job.volumes == [{"volume": "ckpt", "mount_path": "/checkpoints", "read_only": False}]
    assert job_apply(job_id=job.pk) == "applied"
    job = sync_until(job, Job.State.RUNNING)
    assert job.state == Job.State.RUNNING
    sim_spot["sim"].sim.clock.advance(10)  # ten simulated seconds of work
    assert sim_spot["sim"].sim.interrupt("l4-node-0", notice=1, down=2)
    job = sync_until(job, Job.State.SUCCEEDED, timeout=30)
    assert job.state == Job.State.SUCCEEDED, job.pending_reason
    pods = list(job.pods.order_by("started_at"))
    assert [p.interrupted for p in pods] == [True, False]
    assert job.retries == 0
    reasons = list(job.transitions.values_list("reason", flat=True))
    assert any(r.startswith("Interrupted: worker") and "resumes from its checkpoint on ckpt" in r
               for r in reasons)  # fmt: skip
    # The replacement ran for the work left, not all 30 s again.
    resumed = pods[1]
    assert (resumed.finished_at - resumed.started_at).total_seconds() < 28
    client.force_login(sim_spot["alice"])
    page = client.get(reverse("job-detail", args=[job.pk])).content.decode()
    assert "Interruptible; checkpoints on ckpt" in page and "interrupted 1 time" in page


def test_spot_hours_are_billed_at_the_spot_price_with_the_saving_and_the_work_lost(world):
    with spot_sim(world, time_scale=1.0) as sim:
        l4 = sim["pools"]["l4"]
        make_price(l4.gpu_model, "1.2000")
        make_price(l4.gpu_model, "0.4000", profile="spot")
        job = submit(sim, name="no checkpoint", pool="l4", gpus_per_worker=1,
                     interruptible=True, expected_runtime_seconds=600)  # fmt: skip
        assert job_apply(job_id=job.pk) == "applied"
        assert sync_until(job, Job.State.RUNNING).state == Job.State.RUNNING
        # An hour of DCGM scrapes while it runs: billed as spot, at the spot price.
        scrape_an_hour(sim, H)
        rows = UsageHour.objects.filter(job=job)
        assert set(rows.values_list("mig_profile", flat=True)) == {"spot"}
        # The node is taken back: the worker starts over, its work so far lost.
        assert sim["sim"].sim.interrupt("l4-node-0", notice=0.2, down=60)
        deadline = time.monotonic() + 20
        while not job.pods.filter(interrupted=True).exists() and time.monotonic() < deadline:
            sync_until(job, Job.State.QUEUED, timeout=0.5)
        lost = job.pods.get(interrupted=True)
        ran = int((lost.finished_at - lost.started_at).total_seconds())
        assert ran >= 1
        summary = usage_summary(team=sim["vision"], start=H, end=timezone.now() + HOUR)
        october = build_report(month=date(2026, 10, 1))
        (vision,) = [t for t in october["teams"] if t["team"] == "vision"]
        # The month's report has the same figures for its (longer) window.
        month = vision["spot"]
        assert Decimal(month["saved"]) == Decimal(month["on_demand_cost"]) - Decimal(month["cost"])
        assert Decimal(month["saved"]) >= Decimal("0.80")
    assert summary["spot"] == {
        "gpu_hours": "1.0000", "cost": "0.40", "on_demand_cost": "1.20", "saved": "0.80",
        "gpu_hours_lost_to_restarts": str(gpu_hours(ran)),
    }  # fmt: skip
