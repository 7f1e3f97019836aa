"""What /metrics tells an operator (core/metrics.py). The fleet's state read at scrape time follows
the database and the broker (jobs by state and team, each cluster's health and breaker, the
queue's depth, the last worker heartbeat, billing ingestion's lag and gaps); and after a journey
through the real processes (`scripts/serve web`, `worker` with its prefork pool, `beat`, each
serving its metrics) the figures each process counts have moved: tasks sent by beat, tasks run,
waited and retried by the workers, jobs applied and admitted, a cluster that does not answer,
what-if runs, HTTP requests."""

from __future__ import annotations

import http.client
import os
from contextlib import contextmanager
from datetime import timedelta

import pytest
from django.db import connection
from django.urls import reverse
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from tests.config.test_settings_and_stack import _clean_env
from tests.conftest import wait_until
from tests.processes import serving
from tests.queues.builders import job_world_setup, make_pool, submit
from tests.web_server import free_port, get, web_server

DEAD_KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
- name: gone
  cluster: {server: "https://127.0.0.1:PORT", insecure-skip-tls-verify: true}
users: [{name: gone, user: {token: nobody}}]
contexts: [{name: gone, context: {cluster: gone, user: gone}}]
current-context: gone
"""


def samples(text: str) -> dict[tuple, float]:
    """{(sample name, ((label, value), ...)): value} of a scrape."""
    found = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            found[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return found


def value(scraped: dict, name: str, **labels) -> float | None:
    return scraped.get((name, tuple(sorted(labels.items()))))


def total(scraped: dict, name: str, **labels) -> float:
    """The sum over the samples of `name` whose labels include `labels`."""
    return sum(
        v
        for (n, have), v in scraped.items()
        if n == name and all(dict(have).get(k) == w for k, w in labels.items())
    )


@pytest.fixture
def broker_queue(settings):
    """The test broker's portal queue, emptied before and after."""
    from config.celery import app

    def purge():
        with app.connection_for_write() as conn:
            conn.default_channel.queue_purge(settings.CELERY_TASK_DEFAULT_QUEUE)

    purge()
    yield app
    purge()


@pytest.mark.django_db
def test_the_fleet_state_follows_the_database_and_the_broker(client, world, broker_queue):
    from billing.models import IngestState, UsageHour
    from core.models import WorkerHeartbeat
    from fleet.models import Cluster
    from queues.models import Job

    w = job_world_setup(world)
    submit(w, user="alice", team="vision")
    submit(w, user="alice", team="vision")
    carol = submit(w, user="carol", team="nlp")
    Job.objects.filter(pk=carol.pk).update(state=Job.State.RUNNING)
    cluster = w["cluster"]
    now = timezone.now()

    scraped = samples(client.get(reverse("metrics")).content.decode())
    assert value(scraped, "quartermaster_jobs", state="submitted", team="vision") == 2
    assert value(scraped, "quartermaster_jobs", state="running", team="nlp") == 1
    assert value(scraped, "quartermaster_cluster_up", cluster="offline") == 1
    assert value(scraped, "quartermaster_cluster_breaker_open", cluster="offline") == 0
    assert value(scraped, "quartermaster_celery_queue_length", queue="quartermaster") == 0
    assert value(scraped, "quartermaster_broker_up") == 1
    assert value(scraped, "quartermaster_worker_heartbeat_timestamp_seconds") is None
    assert total(scraped, "quartermaster_billing_ingestion_lag_seconds") == 0
    assert all(v == 0 for (n, _), v in scraped.items() if n == "quartermaster_state_read_errors")

    # The cluster stops answering (as a worker's breaker writes it), three messages wait in
    # the broker, a worker beats, billing ingested an hour two hours ago with a gap.
    Cluster.objects.filter(pk=cluster.pk).update(
        unreachable_since=now - timedelta(minutes=10), retry_at=now + timedelta(minutes=1)
    )
    for _ in range(3):
        broker_queue.send_task("fleet.heartbeat", queue="quartermaster")
    WorkerHeartbeat.objects.create(hostname="w1", seen_at=now - timedelta(seconds=30))
    hour = (now - timedelta(hours=3)).replace(minute=0, second=0, microsecond=0)
    IngestState.objects.create(cluster=cluster, hour=hour, state=IngestState.State.DONE)
    IngestState.objects.create(
        cluster=cluster, hour=hour + timedelta(hours=1), state=IngestState.State.FAILED
    )
    UsageHour.objects.create(
        cluster=cluster, hour=hour, gpu_uuid="GPU-1", node="n1", pod="", namespace="",
        last_sample_at=now - timedelta(hours=2), flag_gap=True,
    )  # fmt: skip

    scraped = samples(client.get(reverse("metrics")).content.decode())
    assert value(scraped, "quartermaster_cluster_up", cluster="offline") == 0
    assert value(scraped, "quartermaster_cluster_breaker_open", cluster="offline") == 1
    assert value(scraped, "quartermaster_cluster_unreachable_seconds", cluster="offline") >= 600
    assert value(scraped, "quartermaster_celery_queue_length", queue="quartermaster") == 3
    beat = value(scraped, "quartermaster_worker_heartbeat_timestamp_seconds")
    assert beat == pytest.approx((now - timedelta(seconds=30)).timestamp())
    lag = value(scraped, "quartermaster_billing_ingestion_lag_seconds", cluster="offline")
    assert 7200 <= lag < 7300
    assert value(scraped, "quartermaster_billing_gap_rows", cluster="offline") == 1
    assert value(scraped, "quartermaster_billing_failed_hours", cluster="offline") == 1

    # The breaker's next try is due: still down, no longer refusing.
    Cluster.objects.filter(pk=cluster.pk).update(retry_at=now - timedelta(seconds=1))
    scraped = samples(client.get(reverse("metrics")).content.decode())
    assert value(scraped, "quartermaster_cluster_breaker_open", cluster="offline") == 0
    assert value(scraped, "quartermaster_cluster_up", cluster="offline") == 0


@pytest.mark.django_db
def test_a_broker_that_does_not_answer_is_a_figure_not_a_failed_scrape(client, settings):
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"
    response = client.get(reverse("metrics"))
    assert response.status_code == 200
    scraped = samples(response.content.decode())
    assert value(scraped, "quartermaster_broker_up") == 0
    assert value(scraped, "quartermaster_state_read_errors", reader="jobs") == 0


def _scrape(port: int, token: str | None = None) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(
            "GET", "/metrics", headers={"Authorization": f"Bearer {token}"} if token else {}
        )
        answer = conn.getresponse()
        body = answer.read().decode()
    finally:
        conn.close()
    return answer.status, samples(body) if answer.status == 200 else {}


@contextmanager
def _serve(tmp_path, command: str, **env):
    db = connection.settings_dict
    environment = _clean_env(
        DEBUG="false", SECRET_KEY="metrics-test-key", SECURE_HTTPS="false",
        DATABASE_URL=f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT']}/"
        f"{db['NAME']}",
        CELERY_BROKER_URL=os.environ["CELERY_BROKER_URL"], QM_VAR_DIR=str(tmp_path / command),
        **env,
    )  # fmt: skip
    (tmp_path / command).mkdir(exist_ok=True)
    with serving(command, environment, tmp_path / f"{command}.log") as proc:
        yield proc


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_after_a_journey_the_real_processes_metrics_have_moved(
    transactional_db, world, settings, broker_queue, tmp_path
):
    from django.contrib.auth import get_user_model

    from fleet.models import Cluster
    from planning.models import WhatIfRun
    from planning.services.whatif import whatif_create
    from queues.models import Job, Quota
    from tests.fixtures_cluster import make_sim_cluster
    from tests.queues.builders import sim_jobs_setup

    token = "metrics-token-for-the-test"
    worker_port, beat_port = free_port(), free_port()
    with make_sim_cluster() as sim:
        sim.sync()
        w = sim_jobs_setup(world, sim)
        # A second cluster that does not answer (nothing listens on its port).
        dead = tmp_path / "dead-kubeconfig"
        dead.write_text(DEAD_KUBECONFIG.replace("PORT", str(free_port())))
        gone = Cluster.objects.create(name="gone", kubeconfig_path=str(dead))
        far = make_pool(gone, "far", nodes=1)
        Quota.objects.create(team=w["vision"], pool=far, nominal_gpus=8)

        with (
            _serve(tmp_path, "worker", METRICS_PORT=str(worker_port), METRICS_TOKEN=token,
                   WORKER_CONCURRENCY="2") as worker,
            _serve(tmp_path, "beat", METRICS_PORT=str(beat_port), METRICS_TOKEN=token) as beat,
            web_server(tmp_path, METRICS_TOKEN=token) as web_port,
        ):  # fmt: skip

            def logs():
                return "\n".join(
                    (tmp_path / f"{c}.log").read_text()[-2000:] for c in ("worker", "beat")
                )

            assert wait_until(lambda: _reachable(worker_port, token), timeout=90), logs()
            assert wait_until(lambda: _reachable(beat_port, token), timeout=60), logs()
            # Without the token, no figures.
            assert _scrape(worker_port)[0] == 401 and _scrape(beat_port)[0] == 401
            assert get(web_port, "/metrics")[0] == 401

            job = submit(w, user="alice", team="vision")
            stranded = submit(w, user="alice", team="vision", pool="far")
            admin = get_user_model().objects.get(username="admin")
            run = whatif_create(actor=admin, name="metrics", days=1)

            def admitted():
                return Job.objects.get(pk=job.pk).state in ("admitted", "running")

            assert wait_until(admitted, timeout=120), (Job.objects.get(pk=job.pk).__dict__,
                                                        logs())  # fmt: skip

            def whatif_done():
                return WhatIfRun.objects.get(pk=run.pk).state in ("done", "failed")

            assert wait_until(whatif_done, timeout=120), logs()
            assert wait_until(
                lambda: Cluster.objects.get(pk=gone.pk).unreachable_since is not None, timeout=60
            ), logs()
            assert Job.objects.get(pk=stranded.pk).state == "submitted"

            status, on_worker = _scrape(worker_port, token)
            assert status == 200
            apply = "queues.apply_jobs"
            assert value(on_worker, "quartermaster_celery_task_duration_seconds_count",
                         task=apply, outcome="success") >= 1  # fmt: skip
            assert total(on_worker, "quartermaster_celery_task_wait_seconds_count", task=apply) >= 1
            assert value(on_worker, "quartermaster_job_applies_total",
                         cluster=sim.cluster.name, outcome="applied") >= 1  # fmt: skip
            assert total(on_worker, "quartermaster_kube_request_errors_total", cluster="gone",
                         error="unreachable") >= 1  # fmt: skip
            assert value(on_worker, "quartermaster_job_transitions_total", state="queued") >= 1
            assert total(on_worker, "quartermaster_job_transitions_total") >= 2
            assert value(on_worker, "quartermaster_job_queue_wait_seconds_count") >= 1
            assert value(on_worker, "quartermaster_whatif_runs_total", outcome="done") == 1
            # The pool's processes' figures, added up by the main process (multiprocess mode).
            assert list((tmp_path / "worker" / "prometheus-worker").glob("*.db"))

            status, on_beat = _scrape(beat_port, token)
            assert status == 200
            assert value(on_beat, "quartermaster_celery_tasks_sent_total",
                         task="queues.sync_jobs") >= 1  # fmt: skip
            assert value(on_beat, "process_resident_memory_bytes") > 0

            code, body, _ = get(web_port, "/metrics", token=token)
            assert code == 200
            on_web = samples(body.decode())
            assert value(on_web, "quartermaster_cluster_up", cluster="gone") == 0
            assert value(on_web, "quartermaster_cluster_up", cluster=sim.cluster.name) == 1
            state = Job.objects.get(pk=job.pk).state
            assert value(on_web, "quartermaster_jobs", state=state, team="vision") == 1
            assert value(on_web, "quartermaster_jobs", state="submitted", team="vision") == 1
            assert total(on_web, "quartermaster_http_requests_total", status="4xx") >= 1
            assert worker.poll() is None and beat.poll() is None


def _reachable(port: int, token: str) -> bool:
    try:
        return _scrape(port, token)[0] == 200
    except OSError:
        return False
