"""A cluster that freezes (accepts connections, never answers) holds one worker process at
most, from its first unanswered request: a real prefork worker with two processes, two
kubesims, and the frozen one asked by the apply and by the status sync at once."""

import time

import pytest
import redis
from celery import current_app

from fleet.models import Cluster
from queues.models import Job, Quota
from queues.services.reconcile import cluster_reconcile
from tests.conftest import wait_until
from tests.faults import own_database_env, prefork_worker
from tests.fixtures_cluster import make_sim_cluster
from tests.queues.builders import make_tiers, submit


def _created(sim, job) -> bool:
    return sim.kube.get("batch/v1", "Job", job.k8s_name, job.team.namespace) is not None


@pytest.mark.slow
def test_a_frozen_cluster_holds_one_worker_at_most_from_its_first_request(
    transactional_db, world, settings, tmp_path
):
    make_tiers()
    with make_sim_cluster(name="east") as east, make_sim_cluster(name="west") as west:
        for sim in (east, west):
            Quota.objects.create(team=world["vision"], pool=sim.pools["a100"], nominal_gpus=8)
            cluster_reconcile(cluster_id=sim.cluster.pk)
        redis.Redis.from_url(settings.CELERY_BROKER_URL).flushdb()
        log = tmp_path / "worker.log"
        with prefork_worker(own_database_env(settings), log):
            west.sim.freeze()
            # One worker process waits on west's first unanswered request: the apply.
            stuck = submit(world, name="stuck", gpus_per_worker=1, pool=west.pools["a100"])
            assert wait_until(lambda: west.sim.held >= 1, timeout=20)
            time.sleep(0.5)
            # The other runs the status sync, which asks east (fine) and then west: it must
            # leave west alone instead of waiting on it too.
            current_app.send_task("queues.sync_jobs")
            time.sleep(1.5)
            assert west.sim.held == 1, (
                "a second worker process is waiting on the frozen cluster\n"
                + log.read_text()[-3000:]
            )
            # So the healthy cluster's jobs are created at once, not after west's timeout.
            started = time.monotonic()
            healthy = submit(world, name="healthy", gpus_per_worker=1, pool=east.pools["a100"])
            healthy.refresh_from_db()
            assert wait_until(lambda: _created(east, healthy), timeout=20, interval=0.05)
            took = time.monotonic() - started
            assert took < 3.0, (
                f"east's job took {took:.1f} s while west was frozen\n" + log.read_text()[-3000:]
            )
            assert west.sim.held <= 1
            # The first timeout opens west's breaker, shared through its row.
            assert wait_until(
                lambda: Cluster.objects.get(pk=west.cluster.pk).unreachable_since is not None,
                timeout=20,
            )
            assert Job.objects.get(pk=stuck.pk).state == Job.State.SUBMITTED
            west.sim.thaw()
