"""Job tasks: transient errors retry with backoff, then defer to the periodic re-apply."""

import pytest

from fleet import kube
from queues import tasks as job_tasks
from queues.models import Job
from tests.queues.builders import sim_jobs_setup, submit


@pytest.mark.django_db
def test_apply_task_retries_transient_errors_then_defers(monkeypatch):
    calls = []

    def flaky(*, cluster_id, run=""):
        calls.append(cluster_id)
        raise kube.TransientError("connection refused", reason="Connection")

    monkeypatch.setattr(job_tasks.job_apply, "jobs_apply_ready", flaky)
    result = job_tasks.apply_jobs.apply(args=[7])
    assert result.get() is None  # given up: the jobs stay submitted for the sync to ask again
    assert calls == [7] * (job_tasks.apply_jobs.max_retries + 1)


@pytest.mark.django_db
def test_a_task_cut_off_by_the_database_runs_again_as_the_same_run(monkeypatch):
    """The database going away is transient for every task: the task runs again (keeping its
    id, by which the drain takes back the lease and claims it could not give back), on a
    budget of its own, and gives up only after that."""
    from django.db import OperationalError

    from core import worker

    runs = []

    def cut_off(*, cluster_id, run=""):
        runs.append(run)
        if len(runs) < 3:
            raise OperationalError("server closed the connection unexpectedly")
        return {"applied": 1}

    monkeypatch.setattr(job_tasks.job_apply, "jobs_apply_ready", cut_off)
    assert job_tasks.apply_jobs.apply(args=[7], task_id="run-1").get() == {"applied": 1}
    assert runs == ["run-1"] * 3
    runs.clear()

    def never(*, cluster_id, run=""):
        runs.append(run)
        raise OperationalError("connection refused")

    monkeypatch.setattr(job_tasks.job_apply, "jobs_apply_ready", never)
    assert job_tasks.apply_jobs.apply(args=[7]).get() is None
    assert len(runs) == worker.DATABASE_RETRIES + 1 > job_tasks.apply_jobs.max_retries + 1


def test_apply_task_applies_the_clusters_submitted_jobs_and_returns_what_it_did(
    world, sim_cluster_synced
):
    sim = sim_jobs_setup(world, sim_cluster_synced)
    jobs = [submit(sim, name=f"sweep {i}", gpus_per_worker=1) for i in range(3)]
    assert job_tasks.apply_jobs.apply(args=[sim["cluster"].pk]).get() == {"applied": 3}
    for job in jobs:
        job.refresh_from_db()
        assert job.state == Job.State.QUEUED
        assert sim["sim"].kube.get("batch/v1", "Job", job.k8s_name, job.team.namespace)
