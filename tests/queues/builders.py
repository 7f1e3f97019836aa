"""World builders shared by the tests of every app (test modules wrap them in fixtures; the
queues fixtures are in tests/queues/conftest.py): clusters, pools, tiers, quotas, an approval
policy, on an unreachable cluster or reconciled into a running kubesim, and job helpers."""

import subprocess
import time

from config.celery import app as celery_app
from fleet.models import Cluster, GpuModel, Node, NodePool
from kubesim.testing import wait_stepping
from queues.models import ApprovalPolicy, PriorityTier, Quota
from queues.services.jobs import submit as job_services


def make_cluster(
    name="sim", scheduler="kueue", kueue_api_version="v1beta2", kubeconfig="/dev/null"
):
    return Cluster.objects.create(
        name=name,
        kubeconfig_path=kubeconfig,
        scheduler=scheduler,
        kueue_api_version=kueue_api_version,
    )


def make_pool(cluster, name, *, gpu="NVIDIA A100-SXM4-80GB", nodes=2, gpus_per_node=8, **kw):
    model, _ = GpuModel.objects.get_or_create(name=gpu, defaults={"product_labels": [gpu]})
    pool = NodePool.objects.create(
        cluster=cluster,
        name=name,
        gpu_model=model,
        node_selector=kw.pop("node_selector", {"accelerator": name}),
        taints=kw.pop(
            "taints", [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
        ),
        **kw,
    )
    for i in range(nodes):
        Node.objects.create(
            cluster=cluster,
            name=f"{name}-node-{i}",
            pool=pool,
            gpu_model=model,
            gpu_capacity=gpus_per_node,
            gpu_allocatable=gpus_per_node,
        )
    return pool


def quota_world_setup(world):
    """The tenancy world plus a Kueue cluster with pools a100 (16 GPUs) and l4 (8 GPUs)."""
    cluster = make_cluster()
    a100 = make_pool(cluster, "a100")
    l4 = make_pool(cluster, "l4", gpu="NVIDIA L4", nodes=2, gpus_per_node=4)
    tiers = make_tiers("production", "experiment")
    Quota.objects.create(
        team=world["vision"], pool=a100, nominal_gpus=8, borrowing_limit=4, lending_limit=2
    )
    Quota.objects.create(team=world["vision"], pool=l4, nominal_gpus=2)
    Quota.objects.create(team=world["nlp"], pool=a100, nominal_gpus=4)
    return {**world, "cluster": cluster, "a100": a100, "l4": l4, "tiers": tiers}


# name: (value, preemptible, default): the demo's seed tiers.
TIERS = {
    "production": (1000, False, False),
    "experiment-high": (500, True, False),
    "experiment": (100, True, True),
    "development": (10, True, False),
}


def make_tiers(*names):
    """The named seed tiers (all four when none is named), by name."""
    return {
        name: PriorityTier.objects.create(
            name=name, value=value, preemptible=preemptible, is_default=default
        )
        for name, (value, preemptible, default) in TIERS.items()
        if not names or name in names
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


def dead_pid() -> int:
    """The pid of a process that has ended (for claims held by a dead worker process)."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def run_tasks_eagerly(monkeypatch):
    """Run Celery tasks in-process when they are sent (e.g. from on_commit)."""
    # The app reads Django settings with the CELERY_ namespace: the keys carry it (Celery 5.6
    # looks them up by the prefixed name only).
    monkeypatch.setitem(celery_app.conf, "CELERY_TASK_ALWAYS_EAGER", True)
    monkeypatch.setitem(celery_app.conf, "CELERY_TASK_EAGER_PROPAGATES", True)


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


def sync_until(job, states, *, timeout=20.0, step=True):
    """Run the status sync until the job reaches one of `states` (returns the refreshed job);
    kubesim's clock steps to its next event between syncs (kubesim.testing.wait_stepping).
    step=False waits in real time instead, for a test whose other process (a web server
    following a pod's log) must see the simulated time pass at the clock's own pace."""
    from queues.services.jobs.sync import jobs_sync_cluster

    states = {states} if isinstance(states, str) else set(states)

    def reached():
        jobs_sync_cluster(cluster=job.cluster)
        job.refresh_from_db()
        return job.state in states

    if step:
        wait_stepping(reached, timeout=timeout, interval=0.1)
        return job
    deadline = time.monotonic() + timeout
    while not reached() and time.monotonic() < deadline:
        time.sleep(0.1)
    return job


def pod_template_specs(obj: dict) -> list[dict]:
    """Every pod template spec of a rendered job object, whatever its kind."""
    spec = obj["spec"]
    if obj["kind"] == "PyTorchJob":
        return [r["template"]["spec"] for r in spec["pytorchReplicaSpecs"].values()]
    if obj["kind"] == "JobSet":
        return [r["template"]["spec"]["template"]["spec"] for r in spec["replicatedJobs"]]
    if obj["apiVersion"].startswith("batch.volcano.sh"):
        return [t["template"]["spec"] for t in spec["tasks"]]
    if obj["kind"] == "Job":
        return [spec["template"]["spec"]]
    return []


def render_every_job_kind(world) -> list[dict]:
    """The objects of a batch Job, an Indexed Job, a PyTorchJob, a JobSet with a driver and a
    Volcano job of team vision, as the scheduler backends render them (job_world_setup first)."""
    from queues.backends import backend_named

    kueue = backend_named("kueue")
    objects = []
    for kind, workers, extra in (
        ("job", 1, {}),
        ("job", 3, {}),
        ("pytorchjob", 2, {}),
        ("jobset", 2, {"driver_command": ["python", "driver.py"]}),
    ):
        job = submit(world, name=f"{kind}-{workers}", kind=kind, workers=workers, **extra)
        objects += kueue.job_objects(job)
    volcano = make_cluster("vc", scheduler="volcano")
    pool = make_pool(volcano, "v100")
    Quota.objects.create(team=world["vision"], pool=pool, nominal_gpus=8)
    job = submit(world, name="gang", workers=2, gpus_per_worker=1, pool=pool)
    objects += backend_named("volcano").job_objects(job)
    return objects


def volcano_cluster(sim_jobs):
    """The kubesim cluster switched to Volcano, its queues reconciled."""
    from queues.services.reconcile import cluster_reconcile

    cluster = sim_jobs["cluster"]
    cluster.scheduler = "volcano"
    cluster.save()
    cluster_reconcile(cluster_id=cluster.pk)
    return cluster


def volcano_queue_full(sim_jobs):
    """vision's a100 leaf queue (capability 8 + 4 = 12) full with two running jobs of 6 GPUs
    expected to end 300 s and 600 s after they started; three 4-GPU jobs wait behind them."""
    from queues.models import Job
    from queues.services.jobs.apply import job_apply
    from queues.services.jobs.sync import jobs_sync_cluster

    cluster = volcano_cluster(sim_jobs)
    short = submit(
        sim_jobs, name="short", workers=2, gpus_per_worker=3, expected_runtime_seconds=300
    )
    long = submit(sim_jobs, name="long", workers=2, gpus_per_worker=3, expected_runtime_seconds=600)
    for job in (short, long):
        job_apply(job_id=job.pk)
    short, long = sync_until(short, Job.State.RUNNING), sync_until(long, Job.State.RUNNING)
    assert short.state == long.state == Job.State.RUNNING
    waiting = []
    for name in ("w1", "w2", "w3"):
        # Their PodGroups (which Volcano orders by) created a few simulated seconds apart:
        # timestamps are to the second, and a tie would go by uid, as in Volcano.
        sim_jobs["sim"].sim.clock.advance(2)
        job = submit(sim_jobs, name=name, workers=1, gpus_per_worker=4)
        job_apply(job_id=job.pk)
        sim_jobs["sim"].sim.settle()
        waiting.append(job)
    jobs_sync_cluster(cluster=cluster)
    for job in waiting:
        job.refresh_from_db()
    return cluster, short, long, waiting
