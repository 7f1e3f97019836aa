"""Fixtures of the queues tests: the tenancy world with quotas, with jobs, or in kubesim."""

import pytest

from tests.queues.builders import job_world_setup, quota_world_setup, sim_jobs_setup


@pytest.fixture
def quota_world(world):
    """world + a Kueue cluster row with pools a100 (16 GPUs) and l4 (8 GPUs), tiers, quotas."""
    return quota_world_setup(world)


@pytest.fixture
def jw(world):
    """world + tiers and quotas on an unreachable cluster: for services that never call it."""
    return job_world_setup(world)


@pytest.fixture
def sim_jobs(world, sim_cluster_synced):
    """world + tiers and quotas reconciled into a running kubesim."""
    return sim_jobs_setup(world, sim_cluster_synced)
