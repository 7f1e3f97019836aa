"""A job submitted while the message broker is down: accepted, and its page and the API say
what holds it back (the broker, since when, and that the request is kept) while it holds; once
the broker is back, the beat sends the kept request and the job reaches the cluster. Real
Redis (stopped and started), web server, worker and beat."""

import pytest
import redis
import requests
from django.contrib.auth.hashers import PBKDF2PasswordHasher

from queues.models import Job, Quota
from queues.services.reconcile import cluster_reconcile
from queues.services.tenancy import api_token_create
from tests.config.test_broker_restart import _ping, _start_redis
from tests.conftest import wait_until
from tests.faults import Portal, own_database_env
from tests.fixtures_cluster import make_sim_cluster
from tests.queues.builders import make_tiers

BODY = {"name": "kept", "image": "ghcr.io/acme/train:1", "command": ["python", "train.py"],
        "workers": 1, "gpus_per_worker": 1, "pool": "a100", "max_runtime_seconds": 600}  # fmt: skip
BROKER_SAYS = "the message broker has not been answering since"


@pytest.mark.slow
def test_a_job_waiting_for_the_broker_says_so_until_it_is_sent(
    transactional_db, world, settings, tmp_path
):
    from kubesim.testing import free_port

    port = free_port()
    _start_redis(port, tmp_path)
    make_tiers()
    # Hashed as the portal's processes hash (the tests' own settings use a faster hasher).
    world["alice"].password = PBKDF2PasswordHasher().encode("outage-password", "outagesalt")
    world["alice"].save()
    _, token = api_token_create(user=world["alice"], name="outage")
    env = {**own_database_env(settings), "CELERY_BROKER_URL": f"redis://127.0.0.1:{port}/0"}
    with make_sim_cluster() as sim:
        sim.sync()
        Quota.objects.create(team=world["vision"], pool=sim.pools["a100"], nominal_gpus=8)
        cluster_reconcile(cluster_id=sim.cluster.pk)
        portal = Portal(env, tmp_path, roles=("web", "worker", "beat"))
        try:
            browser = portal.signed_in("alice", "outage-password")
            api = portal.api(token)
            redis.Redis(port=port).shutdown(nosave=True)

            answer = api.post(f"{portal.base}/api/v1/jobs/", json=BODY, timeout=60)
            assert answer.status_code == 201, answer.text[:500]
            job_id = answer.json()["id"]
            detail = api.get(f"{portal.base}/api/v1/jobs/{job_id}/", timeout=30).json()
            assert BROKER_SAYS in detail["pending_reason"], detail["pending_reason"]
            listed = api.get(f"{portal.base}/api/v1/jobs/", timeout=30).json()["results"]
            assert BROKER_SAYS in listed[0]["pending_reason"]
            page = browser.get(f"{portal.base}/jobs/{job_id}/", timeout=30)
            assert page.status_code == 200 and BROKER_SAYS in page.text

            _start_redis(port, tmp_path)
            job = Job.objects.get(pk=job_id)

            def created():
                job.refresh_from_db()
                return bool(job.k8s_name) and (
                    sim.kube.get("batch/v1", "Job", job.k8s_name, job.team.namespace) is not None
                )

            assert wait_until(created, timeout=90), portal.log("worker")[-5000:]
            assert wait_until(lambda: BROKER_SAYS not in _reason(api, portal, job_id), timeout=30)
        finally:
            portal.stop()
            if _ping(port):
                redis.Redis(port=port).shutdown(nosave=True)


def _reason(api: requests.Session, portal: Portal, job_id: int) -> str:
    return api.get(f"{portal.base}/api/v1/jobs/{job_id}/", timeout=30).json()["pending_reason"]
