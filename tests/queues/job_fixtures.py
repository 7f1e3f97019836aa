"""Setup helpers for job tests (test modules wrap them in fixtures): tiers, quotas and an
approval policy on top of `world`, also reconciled into a running kubesim."""

import time

from config.celery import app as celery_app
from fleet.models import Cluster, GpuModel, NodePool
from queues.models import ApprovalPolicy, PriorityTier, Quota
from queues.services import jobs as job_services


def make_tiers():
    return {
        "production": PriorityTier.objects.create(name="production", value=1000, preemptible=False),
        "experiment-high": PriorityTier.objects.create(name="experiment-high", value=500),
        "experiment": PriorityTier.objects.create(name="experiment", value=100, is_default=True),
        "development": PriorityTier.objects.create(name="development", value=10),
    }


def make_quotas(world, pools):
    """vision: 8 A100 (may borrow 4) and 4 L4; nlp: 4 A100 it lends; recsys (product): 8 A100."""
    Quota.objects.create(
        team=world["vision"], pool=pools["a100"], nominal_gpus=8, borrowing_limit=4
    )
    Quota.objects.create(team=world["vision"], pool=pools["l4"], nominal_gpus=4, borrowing_limit=0)
    Quota.objects.create(team=world["nlp"], pool=pools["a100"], nominal_gpus=4, borrowing_limit=0)
    Quota.objects.create(team=world["recsys"], pool=pools["a100"], nominal_gpus=4)


def job_world_setup(world):
    """world + tiers + quotas on an (unreachable) cluster with two pools; no kubesim."""
    cluster = Cluster.objects.create(
        name="offline", kubeconfig_path="/nonexistent", is_default=True
    )
    a100 = GpuModel.objects.create(name="A100-SXM4-80GB")
    l4 = GpuModel.objects.create(name="L4")
    pools = {
        "a100": NodePool.objects.create(
            cluster=cluster,
            name="a100",
            gpu_model=a100,
            node_selector={"accelerator": "nvidia-a100-80gb"},
        ),
        "l4": NodePool.objects.create(cluster=cluster, name="l4", gpu_model=l4),
    }
    make_quotas(world, pools)
    return {**world, "tiers": make_tiers(), "pools": pools, "cluster": cluster}


def run_tasks_eagerly(monkeypatch):
    """Run Celery tasks in-process when they are sent (e.g. from on_commit)."""
    monkeypatch.setitem(celery_app.conf, "task_always_eager", True)
    monkeypatch.setitem(celery_app.conf, "task_eager_propagates", True)


def sim_jobs_setup(world, sim):
    """world + tiers + quotas reconciled into a running kubesim (sim_cluster_synced)."""
    from queues.services.reconcile import cluster_reconcile

    make_quotas(world, sim.pools)
    tiers = make_tiers()
    ApprovalPolicy.objects.create()
    cluster_reconcile(cluster_id=sim.cluster.pk)
    return {**world, "tiers": tiers, "pools": sim.pools, "cluster": sim.cluster, "sim": sim}


def submit(world, *, user="alice", team="vision", **overrides):
    spec = {
        "name": "train",
        "image": "ghcr.io/acme/train:1.0",
        "command": ["python", "train.py"],
        "workers": 1,
        "gpus_per_worker": 2,
        "pool": "a100",
        "max_runtime_seconds": 3600,
        "expected_runtime_seconds": 600,
    }
    spec.update(overrides)
    return job_services.job_submit(user=world[user], team=world[team], **spec)


def sync_until(job, states, *, timeout=20.0):
    """Run the status sync until the job reaches one of `states` (returns the refreshed job)."""
    from queues.services.job_sync import jobs_sync_cluster

    states = {states} if isinstance(states, str) else set(states)
    deadline = time.monotonic() + timeout
    while True:
        jobs_sync_cluster(cluster=job.cluster)
        job.refresh_from_db()
        if job.state in states or time.monotonic() > deadline:
            return job
        time.sleep(0.1)
