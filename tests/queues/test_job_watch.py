"""The watch loop keeps job status current without anyone calling the sync."""

import threading

import pytest

from fleet import kube
from queues.models import Job
from queues.services.jobs.apply import job_apply
from queues.services.jobs.watch import ClusterWatcher
from tests.conftest import wait_until
from tests.fixtures_cluster import make_sim_cluster
from tests.queues.builders import sim_jobs_setup, submit

WATCH_JOIN_SECONDS = 5


@pytest.fixture
def sim_jobs_tx(transactional_db, world):
    with make_sim_cluster() as sim:
        sim.sync()
        yield sim_jobs_setup(world, sim)


def test_watcher_follows_a_job_to_the_end(sim_jobs_tx, monkeypatch):
    monkeypatch.setattr("queues.services.jobs.watch.WATCH_TIMEOUT_SECONDS", 1)
    job = submit(sim_jobs_tx, expected_runtime_seconds=1)
    stop = threading.Event()
    watcher = ClusterWatcher(sim_jobs_tx["cluster"], stop)
    threads = watcher.start()
    try:
        job_apply(job_id=job.pk)

        def finished():
            job.refresh_from_db()
            return job.state == Job.State.SUCCEEDED

        assert wait_until(finished, timeout=20)
        states = list(job.transitions.values_list("to_state", flat=True))
        assert states[-3:] == ["admitted", "running", "succeeded"]
        assert job.pods.count() == 1
    finally:
        stop.set()
        watcher.dirty.set()
        for thread in threads:
            thread.join(timeout=WATCH_JOIN_SECONDS)


def test_an_expired_resource_version_lists_again(sim_jobs_tx, monkeypatch):
    stop = threading.Event()
    watcher = ClusterWatcher(sim_jobs_tx["cluster"], stop)
    client = kube.client_for(sim_jobs_tx["cluster"])
    calls = []
    real_watch = client.watch

    def watch(*args, **kwargs):
        calls.append(kwargs.get("resource_version"))
        if len(calls) == 1:
            raise kube.ResourceExpired("too old", status=410, reason="Expired")
        stop.set()
        return real_watch(*args, **{**kwargs, "timeout_seconds": 1})

    monkeypatch.setattr(client, "watch", watch)
    watcher.resource_versions["v1/Pod"] = "1"
    watcher._watch_loop("v1", "Pod", None)
    assert calls[0] == "1"
    assert calls[1] and calls[1] != "1"  # a fresh resourceVersion from a new list
