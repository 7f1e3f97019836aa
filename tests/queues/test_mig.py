"""MIG from the portal: the inventory sync reads a pool's MIG profile from its nodes; quota,
the ClusterQueue and the namespace's ResourceQuota count the pool's instances in its own
resource; a job in the pool asks for instances, runs in kubesim, and is billed per instance
at the profile's price, shown apart from whole GPUs."""

from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse

from billing.selectors.reports import usage_summary
from fleet.models import NodePool
from queues.backends import backend_named
from queues.manifests.quotas import cluster_queue_manifest
from queues.models import Job, ManagedObject, Quota
from queues.services.jobs.apply import job_apply
from tests.billing.conftest import make_price, scrape_an_hour
from tests.crd_validation import assert_valid_manifest
from tests.fixtures_cluster import GPU_TAINT, SIM_FLEET, make_sim_cluster
from tests.queues.builders import sim_jobs_setup, submit, sync_until

MIG = "nvidia.com/mig-1g.10gb"
# The A100 pool's one node has two GPUs cut into seven 1g.10gb instances each.
MIG_FLEET = {
    "pools": [
        {"name": "a100", "gpuModel": "NVIDIA A100-SXM4-80GB", "nodes": 1, "gpusPerNode": 2,
         "labels": {"accelerator": "nvidia-a100-80gb"}, "taints": [GPU_TAINT],
         "mig": {"profile": "1g.10gb", "perGpu": 7}},
        SIM_FLEET["pools"][1],
    ]
}  # fmt: skip
H = datetime(2026, 10, 5, 10, 0, tzinfo=UTC)


@contextmanager
def mig_sim(world):
    """kubesim with MIG_FLEET, synced (the a100 pool becomes MIG), quotas reconciled."""
    with make_sim_cluster(fleet=MIG_FLEET) as sim:
        sim.sync()
        yield sim_jobs_setup(world, sim)


@pytest.fixture
def sim_mig(world):
    with mig_sim(world) as sim:
        yield sim


def test_the_inventory_reads_the_pools_mig_profile_and_counts_instances(sim_mig, client):
    pool = NodePool.objects.get(pk=sim_mig["pools"]["a100"].pk)
    assert (pool.sharing, pool.mig_profile) == ("mig", "1g.10gb")
    assert pool.gpu_resource == MIG and pool.gpu_unit == "MIG 1g.10gb instance"
    (node,) = pool.nodes.all()
    assert (node.gpu_capacity, node.gpu_allocatable) == (14, 14)
    assert NodePool.objects.get(pk=sim_mig["pools"]["l4"].pk).sharing == "none"
    client.force_login(sim_mig["alice"])
    listed = {p["name"]: p for p in client.get("/api/v1/pools/").json()["results"]}
    assert (listed["a100"]["mig_profile"], listed["a100"]["gpu_resource"]) == ("1g.10gb", MIG)
    assert listed["a100"]["gpus"] == 14
    assert listed["l4"]["gpu_resource"] == "nvidia.com/gpu"


def test_queues_and_guard_rails_count_the_pools_instances(sim_mig):
    vision = sim_mig["vision"]
    quotas = list(Quota.objects.filter(team=vision).select_related("pool"))
    cq = cluster_queue_manifest(vision, quotas)
    assert_valid_manifest(cq)
    (group,) = cq["spec"]["resourceGroups"]
    assert group["coveredResources"] == ["cpu", "memory", "nvidia.com/gpu", MIG]
    flavors = {f["name"]: {r["name"]: r["nominalQuota"] for r in f["resources"]}
               for f in group["flavors"]}  # fmt: skip
    assert (flavors["a100"][MIG], flavors["a100"]["nvidia.com/gpu"]) == (8, 0)
    assert (flavors["l4"][MIG], flavors["l4"]["nvidia.com/gpu"]) == (0, 4)
    # What reached the cluster is the same, and Kueue's schema accepts it.
    live = sim_mig["sim"].kube.get("kueue.x-k8s.io/v1beta2", "ClusterQueue", "qm-vision")
    assert live["spec"]["resourceGroups"][0]["coveredResources"] == group["coveredResources"]
    quota = ManagedObject.objects.get(kind="ResourceQuota", namespace=vision.namespace).desired
    # vision: 8 instances + 4 it may borrow; 4 L4 GPUs without borrowing.
    assert quota["spec"]["hard"][f"requests.{MIG}"] == "12"
    assert quota["spec"]["hard"]["requests.nvidia.com/gpu"] == "4"


def test_a_mig_job_runs_and_is_billed_per_instance_at_the_profiles_price(sim_mig, client):
    a100 = sim_mig["pools"]["a100"]
    make_price(a100.gpu_model, "3.5000")
    make_price(a100.gpu_model, "0.5000", profile="1g.10gb")
    job = submit(sim_mig, name="small", workers=3, gpus_per_worker=1, expected_runtime_seconds=60)
    (batch,) = [m for m in backend_named("kueue").job_objects(job) if m["kind"] == "Job"]
    limits = batch["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {MIG: "1", "memory": limits["memory"]}
    assert job_apply(job_id=job.pk) == "applied"
    job = sync_until(job, Job.State.RUNNING)
    assert job.state == Job.State.RUNNING
    assert job.admitted_pool_id == a100.pk
    assert sorted(p.gpus for p in job.pods.all()) == [1, 1, 1]
    # An hour of scrapes: each of the three instances is billed 3600 s at 0.50.
    scrape_an_hour(sim_mig, H)
    summary = usage_summary(team=sim_mig["vision"], start=H, end=H + timedelta(hours=1))
    assert summary["totals"]["gpu_hours_allocated"] == "3.0000"
    assert summary["totals"]["cost"] == "1.50"
    (model,) = summary["models"]
    assert "1g.10gb" in model["gpu_model"]
    client.force_login(sim_mig["alice"])
    page = client.get(reverse("job-detail", args=[job.pk])).content.decode()
    assert "3 × 1 MIG 1g.10gb instance" in page


def test_volcano_queues_count_mig_instances_apart_from_gpus(world):
    from queues.manifests.quotas import volcano_pool_queue_manifest, volcano_team_queue_manifest
    from tests.queues.builders import make_cluster, make_pool

    cluster = make_cluster("vc", scheduler="volcano")
    mig = make_pool(cluster, "mig", sharing="mig", mig_profile="1g.10gb")
    gpu = make_pool(cluster, "l4", gpu="NVIDIA L4")
    vision = world["vision"]
    quotas = [
        Quota.objects.create(team=vision, pool=mig, nominal_gpus=8, borrowing_limit=2,
                             lending_limit=6),
        Quota.objects.create(team=vision, pool=gpu, nominal_gpus=4, borrowing_limit=0),
    ]  # fmt: skip
    leaf = volcano_pool_queue_manifest(vision, quotas[0])["spec"]
    assert leaf["deserved"] == {MIG: "8"} and leaf["capability"] == {MIG: "10"}
    assert leaf["guarantee"] == {"resource": {MIG: "2"}}
    team = volcano_team_queue_manifest(vision, quotas)["spec"]
    assert team["deserved"] == {MIG: "8", "nvidia.com/gpu": "4"}
    assert team["capability"] == {MIG: "10", "nvidia.com/gpu": "4"}
    vision.queue_hold_reason = "budget"
    held = volcano_team_queue_manifest(vision, quotas)["spec"]
    assert held["capability"] == {MIG: "0", "nvidia.com/gpu": "0"}


SINGLE_FLEET = {
    "pools": [
        {**MIG_FLEET["pools"][0], "mig": {"profile": "1g.10gb", "perGpu": 7, "strategy": "single"}},
        SIM_FLEET["pools"][1],
    ]
}


def test_the_single_strategy_counts_instances_as_gpus_and_bills_them_per_profile(world):
    from fleet.models import GpuModel
    from tests.billing.conftest import scrape_an_hour

    with make_sim_cluster(fleet=SINGLE_FLEET) as sim:
        sim.sync()
        setup = sim_jobs_setup(world, sim)
        pool = NodePool.objects.get(pk=sim.pools["a100"].pk)
        assert (pool.sharing, pool.mig_profile, pool.mig_strategy) == ("mig", "1g.10gb", "single")
        # The device plugin's resource stays nvidia.com/gpu; GPU feature discovery's product
        # ("...-MIG-1g.10gb") is still the A100 model.
        assert pool.gpu_resource == "nvidia.com/gpu"
        assert [n.gpu_capacity for n in pool.nodes.all()] == [14]
        assert not GpuModel.objects.filter(name__contains="MIG").exists()
        make_price(pool.gpu_model, "0.5000", profile="1g.10gb")
        job = submit(setup, name="single", workers=2, gpus_per_worker=1,
                     expected_runtime_seconds=60)  # fmt: skip
        assert job_apply(job_id=job.pk) == "applied"
        assert sync_until(job, Job.State.RUNNING).state == Job.State.RUNNING
        scrape_an_hour(setup, H)
        summary = usage_summary(team=setup["vision"], start=H, end=H + timedelta(hours=1))
    assert summary["totals"]["gpu_hours_allocated"] == "2.0000"
    assert summary["totals"]["cost"] == "1.00"
