"""A PostgreSQL restart under the running portal: while the database is down every submission,
page and health check answers 503 with Retry-After (not 500), and once it is back the drain it
cut off gives back what it held and runs again, so jobs reach the cluster within seconds (they
stalled up to 90 s behind the cut-off drain's lease and claims)."""

import time

import pytest
import redis

from kubesim import resources
from kubesim.testing import running_kubesim
from queues.manifests.common import LABEL_JOB_ID
from tests.conftest import wait_until
from tests.faults import Portal, ThrowawayPostgres, portal_env, query, seed_portal, wait_for
from tests.fixtures_cluster import CRDS_DIR, SIM_FLEET

BODY = {"name": "during", "image": "ghcr.io/acme/train:1", "command": ["python", "train.py"],
        "workers": 1, "gpus_per_worker": 1, "pool": "a100", "max_runtime_seconds": 600}  # fmt: skip
OUTAGE_SECONDS = 20


@pytest.fixture
def throwaway_postgres():
    pg = ThrowawayPostgres()
    pg.start()
    yield pg
    pg.remove()


def _batch_jobs(sim) -> list[dict]:
    return sim.store.list(resources.by_kind("batch/v1", "Job"), "vision")


def _job_objects(sim) -> set[str]:
    return {(o["metadata"].get("labels") or {}).get(LABEL_JOB_ID) for o in _batch_jobs(sim)}


@pytest.mark.slow
def test_a_database_restart_answers_503_and_the_cut_off_drain_goes_on_at_once(
    throwaway_postgres, settings, tmp_path
):
    pg = throwaway_postgres
    broker = settings.CELERY_BROKER_URL
    redis.Redis.from_url(broker).flushdb()
    database = pg.create_database("portal")
    env = portal_env(database_url=database, broker_url=broker, JOBS_APPLY_GATHER_SECONDS="0")
    with running_kubesim(fleet=SIM_FLEET, crds_dir=CRDS_DIR) as sim:
        seeded = seed_portal(env, sim.kubeconfig)
        portal = Portal(env, tmp_path)
        try:
            api = portal.api(seeded["token"])
            browser = portal.signed_in("alice", "faults-password")
            jobs_url = f"{portal.base}/api/v1/jobs/"

            # A drain is under way (the cluster holds its writes) when the database goes away.
            sim.freeze(("PATCH",))
            first = [api.post(jobs_url, json={**BODY, "name": f"first {i}"}, timeout=30)
                     for i in range(3)]  # fmt: skip
            assert [r.status_code for r in first] == [201] * 3, [r.text for r in first]
            ids = [str(r.json()["id"]) for r in first]
            assert wait_until(lambda: sim.held >= 1, timeout=30), portal.log("worker")[-3000:]
            pg.stop()
            down_at = time.monotonic()
            sim.thaw()  # the worker's apply is answered; recording it meets no database

            # Every request answers 503 with Retry-After and says why, never 500.
            during = api.post(jobs_url, json=BODY, timeout=30)
            assert during.status_code == 503, during.text[:500]
            assert int(during.headers["Retry-After"]) > 0
            assert "database is not answering" in during.json()["detail"]
            listing = api.get(jobs_url, timeout=30)
            assert listing.status_code == 503 and listing.headers["Retry-After"]
            page = browser.get(f"{portal.base}/jobs/", timeout=30)
            assert page.status_code == 503 and page.headers["Retry-After"]
            assert "database is not answering" in page.text
            form = browser.post(
                f"{portal.base}/jobs/new/", data={"name": "x"},
                headers={"X-CSRFToken": browser.cookies["csrftoken"],
                         "Referer": f"{portal.base}/jobs/new/"}, timeout=30,
            )  # fmt: skip
            assert form.status_code == 503, form.text[:500]
            health = requests_get(f"{portal.base}/healthz")
            assert health.status_code == 503
            assert health.json()["checks"]["database"].startswith("error")
            assert "database is not answering" in health.json()["details"]["database"]
            workers = requests_get(f"{portal.base}/healthz/workers")
            assert workers.status_code == 503
            assert "database is not answering" in workers.json()["detail"]

            time.sleep(max(0.0, OUTAGE_SECONDS - (time.monotonic() - down_at)))
            pg.start()

            # Back: the jobs the cut-off drain held are created within seconds, and so is one
            # submitted now (before, both waited for its lease and claims to run out).
            after = api.post(jobs_url, json={**BODY, "name": "after"}, timeout=30)
            assert after.status_code == 201, after.text[:500]
            ids.append(str(after.json()["id"]))
            took = wait_for(lambda: set(ids) <= _job_objects(sim), timeout=45)
            assert took is not None and took < 15, (
                f"jobs reached the cluster {took} s after the database came back\n"
                + portal.log("worker")[-4000:]
            )
            states = dict(query(database, "SELECT id::text, state FROM queues_job"))
            assert wait_until(
                lambda: {s for i, s in query(database, "SELECT id::text, state FROM queues_job")
                         if i in ids} == {"queued"} or None, timeout=15,
            ), states  # fmt: skip
            # None was created twice, and nothing answered 500.
            created = _batch_jobs(sim)
            assert len(created) == len({o["metadata"]["name"] for o in created}) == len(ids)
            assert " 500 " not in portal.log("web")
        finally:
            portal.stop()


def requests_get(url: str):
    import requests

    return requests.get(url, timeout=30)
