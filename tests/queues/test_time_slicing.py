"""Time-slicing from the portal: the inventory reads a pool's time-slicing from its nodes (the
shared product is the same GPU model) and counts its shares; jobs share a GPU; billing splits a
time-sliced GPU's time by the documented rule: each replica is a 1/replicas slice, billed to
the pod holding it at the price book's "time-slice 1/<replicas>" price, idle when nobody does,
and reported apart from whole GPUs."""

from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse

from billing.models import UsageHour
from billing.selectors.reports import usage_summary
from fleet.models import GpuModel, NodePool
from queues.models import Job
from queues.services.jobs.apply import job_apply
from tests.billing.conftest import make_price, scrape_an_hour
from tests.fixtures_cluster import SIM_FLEET, make_sim_cluster
from tests.queues.builders import sim_jobs_setup, submit, sync_until

# The L4 pool: one node whose two GPUs are each shared four ways.
SLICED_FLEET = {
    "pools": [SIM_FLEET["pools"][0],
              {**SIM_FLEET["pools"][1], "nodes": 1, "gpusPerNode": 2,
               "timeSlicing": {"replicas": 4}}]
}  # fmt: skip
H = datetime(2026, 10, 5, 10, 0, tzinfo=UTC)
SLICE = "time-slice 1/4"


@pytest.fixture
def sim_sliced(world):
    with make_sim_cluster(fleet=SLICED_FLEET) as sim:
        sim.sync()
        yield sim_jobs_setup(world, sim)


def test_jobs_share_a_gpu_and_each_slice_is_billed_to_its_pod(sim_sliced):
    l4 = NodePool.objects.get(pk=sim_sliced["pools"]["l4"].pk)
    assert l4.sharing == "time-slicing" and l4.gpu_unit == "time-sliced GPU share"
    assert [n.gpu_capacity for n in l4.nodes.all()] == [8]
    assert not GpuModel.objects.filter(name__endswith="SHARED").exists()
    make_price(l4.gpu_model, "1.2000")
    make_price(l4.gpu_model, "0.3000", profile=SLICE)
    jobs = [submit(sim_sliced, name=f"nb{i}", pool="l4", gpus_per_worker=1,
                   expected_runtime_seconds=60) for i in range(2)]  # fmt: skip
    for job in jobs:
        assert job_apply(job_id=job.pk) == "applied"
        assert sync_until(job, Job.State.RUNNING).state == Job.State.RUNNING
    scrape_an_hour(sim_sliced, H)
    rows = UsageHour.objects.filter(hour=H, pool=l4)
    assert set(rows.values_list("mig_profile", flat=True)) == {SLICE}
    held = rows.exclude(pod="")
    assert sorted(held.values_list("job_id", flat=True)) == sorted(j.pk for j in jobs)
    assert set(held.values_list("seconds_allocated", flat=True)) == {3600}
    # The other six slices of the two GPUs were idle for the hour.
    assert rows.filter(pod="").count() == 6
    summary = usage_summary(team=sim_sliced["vision"], start=H, end=H + timedelta(hours=1))
    assert summary["totals"]["gpu_hours_allocated"] == "2.0000"  # two slice-hours
    assert summary["totals"]["cost"] == "0.60"  # at the slice's price, not the GPU's
    (model,) = summary["models"]
    assert SLICE in model["gpu_model"]


def test_a_worker_takes_one_time_sliced_share_and_more_is_refused_with_why(world, api, client):
    """The device plugin's failRequestsGreaterThanOne fails a container asking for more than
    one shared GPU at admission on its node, and without it two shares may be slices of the
    same GPU: the API and the form refuse more than one share per worker and say why."""
    from tests.queues.builders import job_world_setup

    offline = job_world_setup(world)
    l4 = offline["pools"]["l4"]
    l4.sharing = NodePool.Sharing.TIME_SLICING
    l4.save()
    api.force_authenticate(offline["alice"])
    body = {"team": "vision", "name": "notebook", "image": "ghcr.io/acme/nb:1",
            "command": ["python", "serve.py"], "workers": 1, "gpus_per_worker": 2,
            "pool": "l4", "max_runtime_seconds": 600}  # fmt: skip
    refused = api.post("/api/v1/jobs/", body, format="json")
    assert refused.status_code == 400
    (message,) = refused.json()["gpus_per_worker"]
    assert "time-slicing: a worker takes one share" in message
    assert "failRequestsGreaterThanOne" in message and "Ask for 1 per worker" in message
    assert not Job.objects.exists()
    made = api.post("/api/v1/jobs/", {**body, "gpus_per_worker": 1, "workers": 2}, format="json")
    assert made.status_code == 201, made.json()
    # A pool of whole GPUs takes two per worker as before.
    whole = api.post("/api/v1/jobs/", {**body, "pool": "a100", "name": "two"}, format="json")
    assert whole.status_code == 201, whole.json()
    client.force_login(offline["alice"])
    form = {**body, "command": "python serve.py", "tier": "experiment", "env": ""}
    page = client.post(reverse("job-create"), form).content.decode()
    assert "a worker takes one share" in page
