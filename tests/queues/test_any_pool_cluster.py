"""A job for "any pool" goes to the cluster where it would start soonest, by the same estimate
its page shows: free quota now beats quota that frees up later, a sooner end beats a later one,
a disabled cluster is never chosen and an unreachable one only when nothing else is left."""

from datetime import timedelta

import pytest
from django.utils import timezone

from fleet.models import Cluster
from queues.models import ApprovalPolicy, Job
from queues.selectors.jobs import job_cluster_id
from queues.services.jobs.submit import job_submit
from tests.factories import ClusterFactory, JobFactory, NodeFactory, NodePoolFactory, QuotaFactory
from tests.queues.builders import make_tiers


@pytest.fixture
def two_clusters(world):
    """vision holds 8 A100s on each of east and west (one 8-GPU node each)."""
    tiers = make_tiers()
    ApprovalPolicy.objects.create()
    out = {**world, "tiers": tiers}
    for name in ("east", "west"):
        cluster = ClusterFactory(name=name, is_default=name == "east")
        pool = NodePoolFactory(cluster=cluster, name="a100")
        NodeFactory(pool=pool, name=f"{name}-node-0")
        QuotaFactory(team=world["vision"], pool=pool, nominal_gpus=8, borrowing_limit=0)
        out[name] = cluster
        out[f"{name}_pool"] = pool
    return out


def _busy(world, pool, *, ends_in: timedelta):
    started = timezone.now() - timedelta(minutes=5)
    JobFactory(team=world["vision"], owner=world["alice"], state=Job.State.RUNNING,
               workers=1, gpus_per_worker=8, cluster=pool.cluster, pool=pool,
               admitted_pool=pool, started_at=started, admitted_at=started,
               expected_runtime_seconds=int((ends_in + timedelta(minutes=5)).total_seconds()),
               tier=world["tiers"]["experiment"])  # fmt: skip


def _submit(world, **spec):
    return job_submit(
        user=world["alice"], team=world["vision"], name="anywhere", image="ghcr.io/acme/t:1",
        command=["python", "t.py"], workers=1, gpus_per_worker=8, pool="any",
        max_runtime_seconds=3600, **spec,
    )  # fmt: skip


def test_an_any_pool_job_goes_where_it_starts_soonest(two_clusters):
    w = two_clusters
    _busy(w, w["east_pool"], ends_in=timedelta(hours=1))
    assert _submit(w).cluster == w["west"]  # free now on west
    Job.objects.filter(name="anywhere").delete()
    _busy(w, w["west_pool"], ends_in=timedelta(hours=3))
    assert _submit(w).cluster == w["east"]  # east frees up first


def test_a_disabled_or_unreachable_cluster_is_passed_over(two_clusters):
    w = two_clusters
    _busy(w, w["west_pool"], ends_in=timedelta(hours=3))
    Cluster.objects.filter(pk=w["east"].pk).update(enabled=False)
    assert job_cluster_id(team=w["vision"], pool=None, gpus=8) == w["west"].pk
    Cluster.objects.filter(pk=w["east"].pk).update(enabled=True, unreachable_since=timezone.now())
    assert job_cluster_id(team=w["vision"], pool=None, gpus=8) == w["west"].pk
    # Without the GPU count (a page asking where the team's jobs go), the default cluster.
    assert job_cluster_id(team=w["vision"], pool=None) == w["east"].pk
