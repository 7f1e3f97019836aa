"""Billing fixtures: prices, a job with a recorded pod, pods run in kubesim."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from fleet.models import GpuPrice
from queues.models import Job, JobPod, PriorityTier

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
