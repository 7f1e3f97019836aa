"""Billing fixtures shared by the billing tests: prices, jobs, pods in kubesim, spending teams."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from fleet.models import Cluster, GpuModel, GpuPrice, NodePool
from queues.models import Job, JobPod, PriorityTier, Quota
from queues.services import reconcile
from tests.factories import UsageHourFactory
from tests.queues.builders import make_tiers

PRICE_FROM = datetime(2020, 1, 1, tzinfo=UTC)


def make_price(model, price, start=PRICE_FROM, end=None, profile=""):
    return GpuPrice.objects.create(
        gpu_model=model,
        mig_profile=profile,
        price_per_hour=Decimal(price),
        effective_from=start,
        effective_to=end,
    )


def make_job(team, owner, name="train", pod=None, namespace=None, **fields):
    tier, _ = PriorityTier.objects.get_or_create(name="experiment", defaults={"value": 100})
    job = Job.objects.create(
        team=team,
        owner=owner,
        name=name,
        image="busybox",
        tier=tier,
        max_runtime_seconds=3600,
        **fields,
    )
    if pod:
        JobPod.objects.create(job=job, name=pod, namespace=namespace or team.namespace, gpus=1)
    return job


def run_pod(api_client, *, namespace, name, gpus, accelerator, util=50, duration=100000):
    """Create a GPU pod in kubesim and wait until it runs; returns its GPU UUIDs."""
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    try:
        core.create_namespace({"metadata": {"name": namespace}})
    except client.ApiException as exc:
        if exc.status != 409:
            raise
    core.create_namespaced_pod(
        namespace,
        {
            "metadata": {
                "name": name,
                "annotations": {
                    "kubesim.dev/duration-seconds": str(duration),
                    "kubesim.dev/gpu-util": str(util),
                },
            },
            "spec": {
                "nodeSelector": {"accelerator": accelerator},
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                "containers": [
                    {
                        "name": "main",
                        "image": "busybox",
                        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                    }
                ],
            },
        },
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        pod = core.read_namespaced_pod(name, namespace)
        if pod.status is not None and pod.status.phase == "Running":
            uuids = (pod.metadata.annotations or {}).get("kubesim.dev/gpu-uuids", "")
            return [u for u in uuids.split(",") if u]
        time.sleep(0.1)
    raise AssertionError(f"pod {name} did not start")


@pytest.fixture
def l4_priced(sim_cluster_synced):
    make_price(sim_cluster_synced.gpu_models["L4"], "1.2000")
    make_price(sim_cluster_synced.gpu_models["A100-SXM4-80GB"], "3.5000")
    return sim_cluster_synced


@pytest.fixture
def prod(db):
    """The default cluster "prod" (not running) and the GPU models A100 and L4, unpriced."""
    return {
        "cluster": Cluster.objects.create(
            name="prod", kubeconfig_path="/dev/null", is_default=True
        ),
        "a100": GpuModel.objects.create(name="A100", dcgm_model_names=["NVIDIA A100"]),
        "l4": GpuModel.objects.create(name="L4", dcgm_model_names=["NVIDIA L4"]),
    }


@pytest.fixture
def spending(world, sim_cluster_synced, settings):
    """vision has used 10 L4 GPU-hours at 1.20 this month (12.00 EUR); its queues exist."""
    settings.KUBE_MAX_ATTEMPTS = 1
    sc = sim_cluster_synced
    make_tiers("production", "experiment")
    Quota.objects.create(team=world["vision"], pool=sc.pools["l4"], nominal_gpus=4)
    make_price(sc.gpu_models["L4"], "1.2000")
    start = timezone.now().replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    for i in range(10):
        UsageHourFactory(
            hour=start + timedelta(hours=i), cluster=sc.cluster, gpu_uuid="GPU-1", pod="p",
            team=world["vision"], gpu_model=sc.gpu_models["L4"],
        )  # fmt: skip
    reconcile.cluster_reconcile(cluster_id=sc.cluster.pk)
    return {**world, "sc": sc}


@pytest.fixture
def october(world, prod):
    """October 2026: vision ran 10 GPU-hours on A100 (price change mid-month), nlp 4 on L4."""
    cluster, a100, l4 = prod["cluster"], prod["a100"], prod["l4"]
    pool = NodePool.objects.create(cluster=cluster, name="a100", gpu_model=a100)
    make_price(a100, "3.0000", datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 10, 15, tzinfo=UTC))
    make_price(a100, "4.0000", datetime(2026, 10, 15, tzinfo=UTC))
    make_price(l4, "1.0000")
    vision, nlp = world["vision"], world["nlp"]
    job = make_job(vision, world["alice"], name="big-train", pod="train-0")
    held = {"cluster": cluster, "gpu_uuid": "GPU-a", "pod": "train-0", "team": vision, "job": job,
            "gpu_model": a100, "pool": pool}  # fmt: skip
    for i in range(5):  # 5 hours on the 10th at 3.00, 5 hours on the 20th at 4.00
        UsageHourFactory(hour=datetime(2026, 10, 10, i, tzinfo=UTC), **held)
        UsageHourFactory(hour=datetime(2026, 10, 20, i, tzinfo=UTC), **held)
    for i in range(4):
        UsageHourFactory(cluster=cluster, hour=datetime(2026, 10, 11, i, tzinfo=UTC),
                         gpu_uuid="GPU-l", pod="nlp-0", team=nlp, gpu_model=l4,
                         flag_gap=(i == 0))  # fmt: skip
    # Idle capacity: 2 hours of the A100 with no pod; an unattributed pod on L4 for 1 hour.
    for hour in (0, 1):
        UsageHourFactory(cluster=cluster, hour=datetime(2026, 10, 12, hour, tzinfo=UTC),
                         gpu_uuid="GPU-a", pod="", gpu_model=a100, pool=pool,
                         seconds_busy=0)  # fmt: skip
    UsageHourFactory(cluster=cluster, hour=datetime(2026, 10, 12, 0, tzinfo=UTC), gpu_uuid="GPU-l",
                     pod="stray", gpu_model=l4)  # fmt: skip
    return {**prod, "pool": pool, "job": job, **world}


def scrape_an_hour(sim, hour) -> None:
    """Scrape a running kubesim's DCGM exporter once and record it 121 times, 30 s apart,
    from `hour` to the next: every series it shows is covered for exactly that hour."""
    from datetime import timedelta

    from billing import dcgm
    from billing.services.usage import usage_scrape_record

    url = f"{sim['sim'].sim.url}/metrics/dcgm"
    samples = dcgm.scrape(url)
    for k in range(121):
        usage_scrape_record(cluster=sim["cluster"], url=url, samples=samples,
                            scraped_at=hour + timedelta(seconds=30 * k))  # fmt: skip
