"""The GPU fault loop against kubesim (issue #35): a GPU that kubesim's DCGM exporter reports
failed gets its node tainted, the job that held it is stopped, resubmitted (and runs elsewhere)
and its owner told, its team is credited the GPU-hours lost at the price book's price, the loop
does it all once however often it runs, and a platform admin returns the node to service."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.urls import reverse
from django.utils import timezone

from billing import dcgm
from billing.models import GpuFault, GpuFaultCredit, GpuHealth, GpuHealthEvent
from billing.services.gpufaults import (
    gpu_faults_contain_all,
    gpu_health_observe,
    gpu_health_read,
    gpu_node_return_request,
    gpu_nodes_return_all,
)
from billing.tasks import gpu_fault_loop
from fleet.services.node_taints import GPU_FAULT_TAINT_KEY
from queues.models import AuditEvent, Job
from queues.services.jobs.apply import job_apply
from tests.billing.conftest import make_price
from tests.fixtures_cluster import SHARED_DIR
from tests.queues.builders import run_tasks_eagerly, sim_jobs_setup, submit, sync_until

pytestmark = pytest.mark.django_db(transaction=True)


def _health_fields() -> dict[str, str]:
    """The health fields' types as the dcgm-exporter's counters CSV declares them (commented
    out there but for the XID: the deployment enables them)."""
    out = {}
    for line in (Path(SHARED_DIR) / "dcgm" / "default-counters.csv").read_text().splitlines():
        parts = [p.strip() for p in line.lstrip("# ").split(",", 2)]
        if len(parts) == 3 and parts[0] in (
            dcgm.XID,
            dcgm.ECC_DBE,
            dcgm.THERMAL_VIOLATION,
            dcgm.POWER_VIOLATION,
        ):
            out[parts[0]] = parts[1]
    return out


def test_the_health_fields_are_the_exporters_own():
    assert _health_fields() == {
        dcgm.XID: "gauge",
        dcgm.ECC_DBE: "counter",
        dcgm.THERMAL_VIOLATION: "counter",
        dcgm.POWER_VIOLATION: "counter",
    }


EXPOSITION = """# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered.
# TYPE DCGM_FI_DEV_XID_ERRORS gauge
DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="GPU-a",modelName="NVIDIA A100",Hostname="n1"} 0
DCGM_FI_DEV_XID_ERRORS{gpu="1",UUID="GPU-b",modelName="NVIDIA A100",Hostname="n1"} 79
# HELP DCGM_FI_DEV_ECC_DBE_VOL_TOTAL Total number of double-bit volatile ECC errors.
# TYPE DCGM_FI_DEV_ECC_DBE_VOL_TOTAL counter
DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{gpu="0",UUID="GPU-a",modelName="NVIDIA A100",Hostname="n1"} 2
# HELP DCGM_FI_DEV_THERMAL_VIOLATION Throttling duration due to thermal constraints (in ns).
# TYPE DCGM_FI_DEV_THERMAL_VIOLATION counter
DCGM_FI_DEV_THERMAL_VIOLATION{gpu="0",UUID="GPU-a",modelName="NVIDIA A100",hostname="n1"} 5e9
# HELP DCGM_EXP_XID_ERRORS_COUNT reported XIDs during last window
# TYPE DCGM_EXP_XID_ERRORS_COUNT counter
DCGM_EXP_XID_ERRORS_COUNT{gpu="1",UUID="GPU-b",Hostname="n1",err_code="79",err_msg="Off the bus"} 2
DCGM_EXP_XID_ERRORS_COUNT{gpu="1",UUID="GPU-b",Hostname="n1",err_code="13",err_msg="Graphics"} 1
"""


def test_parse_health_reads_each_gpus_figures():
    by = {s.gpu_uuid: s for s in dcgm.parse_health(EXPOSITION)}
    assert by["GPU-b"].xid == 79 and by["GPU-b"].gpu_index == 1 and by["GPU-b"].node == "n1"
    assert by["GPU-a"].xid == 0 and by["GPU-a"].ecc_dbe == 2
    assert by["GPU-a"].thermal_ns == 5e9 and by["GPU-a"].power_ns is None
    assert by["GPU-b"].xid_counts == {79: 2, 13: 1} and by["GPU-a"].xid_counts == {}


def _sample(**figures):
    return dcgm.GpuHealthSample(gpu_uuid="GPU-x", node="n1", gpu_index=3, model_name="A100",
                                **figures)  # fmt: skip


def test_states_xid_ecc_and_throttling(sim_cluster):
    cluster, t0 = sim_cluster.cluster, timezone.now()
    # A harmless XID (13: an application's illegal access) and no throttling: healthy.
    gpu_health_observe(cluster=cluster, samples=[_sample(xid=13, thermal_ns=0, power_ns=0)],
                       at=t0)  # fmt: skip
    row = GpuHealth.objects.get(gpu_uuid="GPU-x")
    assert row.state == "healthy" and row.last_xid == 13
    # Throttled for heat 30 of the next 60 s (above the 20 % default): degraded, not a fault.
    gpu_health_observe(cluster=cluster, samples=[_sample(xid=13, thermal_ns=30e9, power_ns=0)],
                       at=t0 + timedelta(seconds=60))  # fmt: skip
    row.refresh_from_db()
    assert row.state == "degraded" and "thermal 50%" in row.reason
    assert row.thermal_share == pytest.approx(0.5)
    assert not GpuFault.objects.exists()
    # A double-bit ECC error: failed, a fault opened, and history kept.
    opened = gpu_health_observe(
        cluster=cluster, samples=[_sample(xid=13, ecc_dbe=1, thermal_ns=30e9, power_ns=0)],
        at=t0 + timedelta(seconds=120),
    )  # fmt: skip
    assert [f.gpu_uuid for f in opened] == ["GPU-x"]
    row.refresh_from_db()
    assert row.state == "failed" and "double-bit" in row.reason
    history = list(GpuHealthEvent.objects.filter(gpu_uuid="GPU-x").values_list("state", flat=True))
    assert history == ["failed", "degraded"]  # newest first
    # Seen again: the same fault, not a second one.
    assert gpu_health_observe(cluster=cluster, samples=[_sample(xid=13, ecc_dbe=1)],
                              at=t0 + timedelta(seconds=150)) == []  # fmt: skip
    assert GpuFault.objects.count() == 1


@pytest.fixture
def faulty(world, sim_cluster_synced, monkeypatch):
    run_tasks_eagerly(monkeypatch)
    w = sim_jobs_setup(world, sim_cluster_synced)
    make_price(w["pools"]["a100"].gpu_model, "3.0000")
    for name in ("alice", "bob"):
        world[name].email = f"{name}@example.org"
        world[name].save()
    w["url"] = f"{w['sim'].sim.url}/metrics/dcgm"
    w["cluster"].dcgm_scrape_urls = [w["url"]]
    w["cluster"].save(update_fields=["dcgm_scrape_urls"])
    return w


def _loop(w, at=None):
    """One run of the loop's first two stages at `at` (the beat task runs them at now)."""
    at = at or timezone.now()
    gpu_health_read(cluster=w["cluster"], urls=[w["url"]], prometheus="", at=at)
    return gpu_faults_contain_all(now=at)


def _held_gpu(w, job):
    """(node, GPU index, UUID) of one GPU the job's pod holds, as the exporter shows it."""
    pod = job.pods.get()
    for sample in dcgm.scrape(w["url"]):
        if sample.sid.pod == pod.name:
            health = {h.gpu_uuid: h for h in dcgm.scrape_health(w["url"])}[sample.sid.gpu_uuid]
            return sample.sid.node, health.gpu_index, sample.sid.gpu_uuid
    raise AssertionError("the job's GPUs are not in the exporter")


def _running_pair(w, first: str, second: str):
    """Two running jobs, `first` alice's with 2 GPUs, `second` bob's with 1, and (node, GPU
    index, UUID) of a GPU the first holds."""
    jobs = [submit(w, name=first, gpus_per_worker=2),
            submit(w, name=second, user="bob", gpus_per_worker=1)]  # fmt: skip
    for j in jobs:
        job_apply(job_id=j.pk)
    jobs = [sync_until(j, "running") for j in jobs]
    return (*jobs, _held_gpu(w, jobs[0]))


def _taints(w, node):
    return (w["sim"].kube.get("v1", "Node", node).get("spec") or {}).get("taints") or []


def test_a_failed_gpu_taints_its_node_moves_the_job_and_credits_the_team(
    faulty, mailoutbox, django_capture_on_commit_callbacks
):
    w = faulty
    job, other, (node, index, uuid) = _running_pair(w, "train", "bystander")
    assert _loop(w) == {"contained": 0, "failed": 0}  # all healthy: nothing to do

    w["sim"].sim.gpu_fault(node, index, "xid:79")
    detected = timezone.now()
    with django_capture_on_commit_callbacks(execute=True):
        assert _loop(w, detected) == {"contained": 1, "failed": 0}

    # The node: tainted NoSchedule with the portal's key, naming the GPU and the XID.
    assert {"key": GPU_FAULT_TAINT_KEY, "value": f"gpu{index}-xid79", "effect": "NoSchedule"} in (
        _taints(w, node)
    )
    fault = GpuFault.objects.get()
    assert (fault.node_name, fault.gpu_index, fault.xid, fault.state) == (
        node, index, 79, "contained"
    )  # fmt: skip
    assert GpuHealth.objects.get(gpu_uuid=uuid).state == "failed"

    # The job: failed with the reason, a copy resubmitted as its owner.
    job.refresh_from_db()
    assert job.state == "failed" and f"GPU {index} of node {node} failed" in job.exit_reason
    credit = GpuFaultCredit.objects.get()
    copy = credit.resubmitted_job
    assert copy.resubmitted_from_id == job.pk and copy.owner == job.owner
    # The bystander on the same node's healthy GPUs (or another node) runs on.
    other.refresh_from_db()
    assert other.state == "running" and not GpuFaultCredit.objects.filter(job=other).exists()

    # The credit: 2 GPUs × the seconds the pod ran before the fault, at 3.00/GPU-hour.
    started = job.pods.get().started_at
    seconds = 2 * int((detected - started).total_seconds())
    assert credit.gpu_seconds_lost == seconds and credit.team == job.team
    assert credit.price_per_hour == Decimal("3.0000")
    assert credit.amount == (Decimal(seconds) * 3 / 3600).quantize(Decimal("0.01"))

    # The owner and the team's lead are told once.
    told = [m for m in mailoutbox if "stopped by a GPU fault" in m.subject]
    assert len(told) == 1 and set(told[0].to) == {"alice@example.org", "bob@example.org"}
    assert f"resubmitted as job #{copy.pk}" in told[0].body
    verbs = set(AuditEvent.objects.values_list("verb", flat=True))
    assert {"gpu.fault", "node.taint", "job.gpu_fault"} <= verbs

    # Idempotent: the loop again (a worker re-running it) changes nothing.
    with django_capture_on_commit_callbacks(execute=True):
        assert _loop(w) == {"contained": 0, "failed": 0}
    assert GpuFault.objects.count() == GpuFaultCredit.objects.count() == 1
    assert Job.objects.filter(resubmitted_from=job).count() == 1
    assert len([m for m in mailoutbox if "GPU fault" in m.subject]) == 1

    # The copy runs, and not on the tainted node.
    job_apply(job_id=copy.pk)
    copy = sync_until(copy, "running")
    assert copy.state == "running"
    assert {p.node_name for p in copy.pods.all()} and node not in {
        p.node_name for p in copy.pods.all()
    }


def test_an_admin_returns_the_node_to_service(faulty):
    w = faulty
    node = w["cluster"].nodes.filter(pool=w["pools"]["a100"]).first().name
    w["sim"].sim.gpu_fault(node, 5, "ecc")
    _loop(w)
    assert any(t["key"] == GPU_FAULT_TAINT_KEY for t in _taints(w, node))
    with pytest.raises(PermissionDenied):
        gpu_node_return_request(cluster=w["cluster"], node=node, actor=w["alice"], reason="ok")
    with pytest.raises(ValidationError):
        gpu_node_return_request(cluster=w["cluster"], node=node, actor=w["admin"], reason=" ")
    # The request commits, then the loop's task (run eagerly here) takes the taint off.
    assert (
        gpu_node_return_request(
            cluster=w["cluster"], node=node, actor=w["admin"], reason="GPU 5 reseated"
        )
        == 1
    )
    assert gpu_nodes_return_all() == 0  # already done: nothing left returning
    assert not any(t["key"] == GPU_FAULT_TAINT_KEY for t in _taints(w, node))
    assert any(t["key"] == "nvidia.com/gpu" for t in _taints(w, node))  # others' taints stay
    fault = GpuFault.objects.get()
    assert fault.state == "returned" and fault.returned_at is not None
    # The exporter still reports the error count: accepted, so the GPU stays healthy.
    _loop(w)
    assert GpuHealth.objects.get(node_name=node, gpu_index=5).state == "healthy"
    assert GpuFault.objects.count() == 1
    event = AuditEvent.objects.get(verb="node.return_to_service")
    assert event.actor == w["admin"] and event.message == "GPU 5 reseated"
    assert AuditEvent.objects.filter(verb="node.untaint").exists()
    # A new error after that is a new fault, found by the beat task itself.
    w["sim"].sim.gpu_fault(node, 5, "ecc")
    result = gpu_fault_loop()
    assert (
        result["contained"] == 1 and result["gpus"] == 28
    )  # every GPU of the fleet: 2 × 8 + 2 × 4 + 4
    assert GpuFault.objects.exclude(state="returned").count() == 1


def test_the_same_xid_again_after_the_return_is_a_new_fault(faulty, client):
    """The last-XID gauge does not change when the same XID comes again; DCGM's XID count does:
    a GPU returned to service that falls off the bus again is a new fault, while the XID that
    was returned from, in the window or leaving it, is not."""
    w = faulty
    node = w["cluster"].nodes.filter(pool=w["pools"]["a100"]).first().name
    w["sim"].sim.gpu_fault(node, 2, "xid:79")
    _loop(w)
    gpu_node_return_request(cluster=w["cluster"], node=node, actor=w["admin"], reason="reseated")
    row = GpuHealth.objects.get(node_name=node, gpu_index=2)
    assert (row.state, row.last_xid, row.xid_counts) == ("healthy", 79, {"79": 1})
    _loop(w)  # the same XID, still counted in the exporter's window: nothing new
    row.refresh_from_db()
    assert row.state == "healthy" and GpuFault.objects.exclude(state="returned").count() == 0
    w["sim"].sim.clock.advance(400)  # out of the window: the count is gone
    _loop(w)
    row.refresh_from_db()
    assert (row.state, row.last_xid, row.xid_counts) == ("healthy", 79, {})

    w["sim"].sim.gpu_fault(node, 2, "xid:79")
    _loop(w)
    row.refresh_from_db()
    assert row.last_xid == 79 and row.xid_counts == {"79": 1}
    assert row.state == "failed" and row.reason == "XID 79 reported by the driver again"
    fault = GpuFault.objects.exclude(state="returned").get()
    assert (fault.node_name, fault.gpu_index, fault.xid) == (node, 2, 79)
    assert any(t["key"] == GPU_FAULT_TAINT_KEY for t in _taints(w, node))
    # The node's page and the API say why, and what the driver reported lately.
    client.force_login(w["admin"])
    page = client.get(reverse("billing-gpu-health-node", args=[w["cluster"].pk, node]))
    assert "XID 79 reported by the driver again" in page.content.decode()
    assert "(79 ×1 recently)" in page.content.decode()
    api = client.get(reverse("billing-api-gpu-health-node", args=[w["cluster"].pk, node])).json()
    gpu = next(g for g in api["gpus"] if g["index"] == 2)
    assert gpu["recent_xids"] == {"79": 1} and gpu["state"] == "failed"


def test_a_cluster_metered_through_prometheus_has_its_faults_found_there(faulty, settings):
    """No direct scrape: the beat task reads the GPUs' health (and who holds them) from the
    cluster's Prometheus, which scrapes kubesim's exporter; the failed GPU's job is moved."""
    import time
    from datetime import UTC, datetime

    from tests.billing.prom import prometheus_available, running_prometheus

    if not prometheus_available():
        pytest.fail("prometheus is missing: run `make test`, which installs it")
    w = faulty
    job = submit(w, name="train", gpus_per_worker=1)
    job_apply(job_id=job.pk)
    job = sync_until(job, "running")
    node, index, _ = _held_gpu(w, job)
    w["sim"].sim.gpu_fault(node, index, "xid:95")
    w["cluster"].dcgm_scrape_urls = []
    w["cluster"].save(update_fields=["dcgm_scrape_urls"])
    host = w["sim"].sim.url.split("//", 1)[1]
    with running_prometheus(targets=[host], interval="1s") as url:
        client = dcgm.Prometheus(base_url=url)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not client.query(
            f"{dcgm.XID} == 95", datetime.now(UTC)
        ):
            time.sleep(0.5)
        settings.PROMETHEUS_URL, settings.BILLING_SOURCE = url, "prometheus"
        result = gpu_fault_loop()
    assert result["contained"] == 1 and result["gpus"] == 28
    fault = GpuFault.objects.get()
    assert (fault.node_name, fault.gpu_index, fault.xid) == (node, index, 95)
    assert GpuHealth.objects.get(gpu_uuid=fault.gpu_uuid).xid_counts == {"95": 1}
    assert GpuFaultCredit.objects.get().job_id == job.pk
    job.refresh_from_db()
    assert job.state == "failed"


def test_a_disabled_clusters_faults_wait(sim_cluster_synced):
    """No writes to a disabled cluster: its node is not tainted until it is enabled again."""
    cluster = sim_cluster_synced.cluster
    node = cluster.nodes.first().name
    fault = GpuFault.objects.create(cluster=cluster, node_name=node, gpu_uuid="GPU-d",
                                    reason="XID 79", detected_at=timezone.now())  # fmt: skip
    cluster.enabled = False
    cluster.save(update_fields=["enabled"])
    assert gpu_faults_contain_all() == {"contained": 0, "failed": 0}
    fault.refresh_from_db()
    assert fault.state == "open" and fault.tainted_at is None
    cluster.enabled = True
    cluster.save(update_fields=["enabled"])
    assert gpu_faults_contain_all() == {"contained": 1, "failed": 0}
    taints = sim_cluster_synced.kube.get("v1", "Node", node)["spec"]["taints"]
    assert any(t["key"] == GPU_FAULT_TAINT_KEY for t in taints)


def test_a_job_that_died_of_the_fault_before_it_was_seen_is_resubmitted_and_credited(faulty):
    """The workload crashed on the XID 20 s before the exporter was read: its job failed on its
    own; it is still credited (until it died) and resubmitted. One that ended minutes earlier
    was not hit."""
    from queues.services.jobs.lifecycle import job_transition

    w = faulty
    hit, earlier, (node, index, uuid) = _running_pair(w, "crashed", "done-before")
    detected = timezone.now() + timedelta(minutes=10)
    for job, ended in ((hit, detected - timedelta(seconds=20)),
                       (earlier, detected - timedelta(minutes=5))):  # fmt: skip
        job.pods.update(finished_at=ended, phase="Failed", node_name=node, gpu_uuids=[uuid])
        job_transition(job_id=job.pk, to_state="failed", at=ended, reason="worker failed",
                       fields={"finished_at": ended})  # fmt: skip
    GpuFault.objects.create(
        cluster=w["cluster"], node_name=node, gpu_uuid=uuid, gpu_index=index, xid=79,
        reason="XID 79 reported by the driver", detected_at=detected,
    )  # fmt: skip
    assert gpu_faults_contain_all(now=detected)["contained"] == 1
    credit = GpuFaultCredit.objects.get()
    assert credit.job_id == hit.pk and credit.resubmitted_job.resubmitted_from_id == hit.pk
    started = hit.pods.get().started_at
    ended = detected - timedelta(seconds=20)
    assert credit.gpu_seconds_lost == 2 * int((ended - started).total_seconds())
    assert not Job.objects.filter(resubmitted_from=earlier).exists()


def test_a_checkpointed_job_is_credited_the_run_since_its_checkpoint(faulty, client):
    """Its resubmitted copy resumes from the checkpoint, so only the run after it was lost (as
    a preemption's loss is counted); a checkpoint of an earlier run saved nothing of this one.
    The credit names the checkpoint on the job's page and in the month's report."""
    from billing.exports import report_csv
    from billing.selectors.reports import finance_report
    from queues.models import JobCheckpoint
    from queues.services.protection import checkpoint_report

    w = faulty
    saved, stale, (node, index, uuid) = _running_pair(w, "saved", "stale")
    checkpoint = checkpoint_report(job=saved, actor=None, step=500, source="log")
    started = {j.pk: j.pods.get().started_at for j in (saved, stale)}
    JobCheckpoint.objects.create(job=stale, at=started[stale.pk] - timedelta(hours=1), step=1)
    for job in (saved, stale):
        job.pods.update(node_name=node, gpu_uuids=[uuid])
    detected = timezone.now() + timedelta(minutes=10)
    GpuFault.objects.create(
        cluster=w["cluster"], node_name=node, gpu_uuid=uuid, gpu_index=index, xid=79,
        reason="XID 79 reported by the driver", detected_at=detected,
    )  # fmt: skip
    assert gpu_faults_contain_all(now=detected)["contained"] == 1

    credit = GpuFaultCredit.objects.get(job=saved)
    since = max(checkpoint.at, started[saved.pk])
    assert since == checkpoint.at and credit.checkpoint_at == checkpoint.at
    assert credit.gpu_seconds_lost == 2 * int((detected - since).total_seconds())
    assert credit.amount == (Decimal(credit.gpu_seconds_lost) * 3 / 3600).quantize(Decimal("0.01"))
    old = GpuFaultCredit.objects.get(job=stale)
    assert old.checkpoint_at is None
    assert old.gpu_seconds_lost == int((detected - started[stale.pk]).total_seconds())

    client.force_login(w["alice"])
    page = client.get(f"/billing/jobs/{saved.pk}/usage/").content.decode()  # its use card
    assert "the run since its checkpoint at" in page
    assert checkpoint.at.strftime("%Y-%m-%d %H:%M") in page
    report = finance_report(month=detected.date().replace(day=1))
    team = next(t for t in report["teams"] if t["team"] == saved.team.slug)
    line = next(c for c in team["gpu_fault_credits"]["lines"] if c["job_id"] == saved.pk)
    assert line["checkpoint_at"] == checkpoint.at.isoformat()
    assert f"since its checkpoint at {checkpoint.at.isoformat()[:16]}" in report_csv(report)
