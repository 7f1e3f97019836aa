"""Liveness apart from readiness, as the chart's probes ask them (core/probes.py): web answers
/livez without the database or the broker and /readyz with them and the schema; workers and
beat keep probe files that `scripts/serve probe alive|ready` reads. Under a database outage and
a broker outage (a proxy in front of the real PostgreSQL and Redis, cut and restored), the real
processes stay alive (liveness 200 / exit 0: nothing would restart them) while readiness goes
503 / exit 1 and comes back with the service. And pods wait for the schema of their version."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.db import connection
from django.urls import reverse

from core import probes
from tests.config.test_settings_and_stack import _clean_env, _free_port
from tests.conftest import REPO_ROOT, wait_until
from tests.outage import OutageProxy
from tests.processes import SERVE, serving
from tests.web_server import answers, get, web_server


def test_livez_answers_without_the_database(client):
    # No database access is allowed in this test: a query would raise.
    response = client.get(reverse("livez"))
    assert response.status_code == 200 and response.content == b"ok\n"


@pytest.mark.django_db
def test_readyz_says_what_fails(client, settings):
    response = client.get(reverse("readyz"))
    assert response.status_code == 200, response.content
    assert response.json() == {
        "status": "ready",
        "checks": {"database": "ok", "broker": "ok", "schema": "ok"},
    }
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"
    response = client.get(reverse("readyz"))
    assert response.status_code == 503
    assert response.json()["checks"]["broker"].startswith("error: ")
    assert response.json()["checks"]["database"] == "ok"


@pytest.fixture
def outage(db, settings):
    """Proxies in front of the test database and broker: (database_url, broker_url, db, broker)."""
    params = connection.settings_dict
    database = OutageProxy(params["HOST"] or "127.0.0.1", int(params["PORT"] or 5432))
    broker_url = urlsplit(settings.CELERY_BROKER_URL)
    if broker_url.scheme != "redis":
        pytest.fail("the outage tests need CELERY_BROKER_URL=redis://… (make test sets it)")
    broker = OutageProxy(broker_url.hostname, broker_url.port or 6379)
    urls = {
        "DATABASE_URL": f"postgres://{params['USER']}:{params['PASSWORD']}@127.0.0.1:"
        f"{database.port}/{params['NAME']}",
        "CELERY_BROKER_URL": urlunsplit(broker_url._replace(netloc=f"127.0.0.1:{broker.port}")),
    }
    yield urls, database, broker
    database.close()
    broker.close()


def _stays(predicate, seconds: float) -> bool:
    """predicate() holds at every check for `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not predicate():
            return False
        time.sleep(0.5)
    return True


def _ready(port) -> tuple[int, dict]:
    status, body, _ = get(port, "/readyz", timeout=10)
    return status, json.loads(body)


@pytest.mark.slow
def test_web_under_a_database_and_a_broker_outage_stays_alive_and_is_not_ready(outage, tmp_path):
    urls, database, broker = outage
    with web_server(tmp_path, **urls) as port:
        assert get(port, "/livez")[0] == 200
        assert wait_until(lambda: _ready(port)[0] == 200, timeout=30)
        for name, proxy in (("database", database), ("broker", broker)):
            proxy.cut()
            assert wait_until(lambda: _ready(port)[0] == 503, timeout=20), name
            status, body = _ready(port)
            assert body["checks"][name].startswith("error: "), body
            # Alive all along: a liveness probe would not restart it.
            assert _stays(lambda: get(port, "/livez", timeout=5)[0] == 200, 5), name
            proxy.restore()
            assert wait_until(lambda: _ready(port)[0] == 200, timeout=30), name
            assert _ready(port)[1]["checks"] == {"database": "ok", "broker": "ok", "schema": "ok"}


def _probe(var_dir, kind: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [SERVE, "probe", kind], env=_clean_env(QM_VAR_DIR=str(var_dir)),
        capture_output=True, text=True, timeout=20,
    )  # fmt: skip


@contextmanager
def _process(tmp_path, command: str, urls: dict):
    env = _clean_env(
        DEBUG="false", SECRET_KEY="probe-test-key", SECURE_HTTPS="false",
        QM_VAR_DIR=str(tmp_path), WORKER_CONCURRENCY="1", **urls,
    )  # fmt: skip
    with serving(command, env, tmp_path / f"{command}.log") as proc:
        yield proc


@pytest.mark.slow
def test_a_worker_under_a_database_and_a_broker_outage_stays_alive_and_is_not_ready(
    outage, tmp_path
):
    urls, database, broker = outage
    with _process(tmp_path, "worker", urls) as worker:
        log = tmp_path / "worker.log"
        assert wait_until(lambda: _probe(tmp_path, "ready").returncode == 0, timeout=90), (
            log.read_text()[-3000:]
        )
        assert _probe(tmp_path, "alive").returncode == 0
        for name, proxy in (("database", database), ("broker", broker)):
            proxy.cut()
            assert wait_until(lambda: _probe(tmp_path, "ready").returncode == 1, timeout=30), name
            said = _probe(tmp_path, "ready").stderr
            assert said.startswith("not ready") and f"{name}: error: " in said, said
            assert _stays(lambda: _probe(tmp_path, "alive").returncode == 0, 12), name
            assert worker.poll() is None, log.read_text()[-3000:]
            proxy.restore()
            assert wait_until(lambda: _probe(tmp_path, "ready").returncode == 0, timeout=60), (
                name,
                _probe(tmp_path, "ready").stderr,
            )


@pytest.mark.slow
def test_beat_under_a_database_and_a_broker_outage_stays_alive(outage, tmp_path):
    urls, database, broker = outage
    with _process(tmp_path, "beat", urls) as beat:
        assert wait_until(lambda: _probe(tmp_path, "alive").returncode == 0, timeout=60), (
            tmp_path / "beat.log"
        ).read_text()[-3000:]
        # Beat keeps no readiness: nothing routes to it.
        assert "not written yet" in _probe(tmp_path, "ready").stderr
        database.cut()
        broker.cut()
        assert _stays(lambda: _probe(tmp_path, "alive").returncode == 0, 15)
        assert beat.poll() is None


def test_a_probe_file_not_written_lately_fails_the_probe(tmp_path, settings):
    settings.VAR_DIR = tmp_path
    stop = probes.start_probe_files(ready=False)
    assert wait_until(lambda: _probe(tmp_path, "alive").returncode == 0, timeout=10)
    stop.set()
    assert wait_until(lambda: not any(t.name == "probe-alive" for t in threading.enumerate()), 10)
    alive = tmp_path / "probes" / "alive"
    old = time.time() - 120
    os.utime(alive, (old, old))
    done = _probe(tmp_path, "alive")
    assert done.returncode == 1 and "not written for" in done.stderr


@pytest.mark.slow
def test_pods_wait_for_the_schema_of_their_version(tmp_path):
    """On a database the migration Job has not migrated yet, the init container waits and web
    answers alive but not ready; once migrated, both go on."""
    env = _clean_env(
        DEBUG="false", SECRET_KEY="schema-test-key", SECURE_HTTPS="false",
        QM_VAR_DIR=str(tmp_path), DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
        WAIT_FOR_SCHEMA_SECONDS="0.5",
    )  # fmt: skip
    waiter = subprocess.Popen(
        [SERVE, "wait-for-schema"], cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    port = _free_port()
    web = subprocess.Popen([SERVE, "web"], cwd=REPO_ROOT,
                           env={**env, "WEB_BIND": f"127.0.0.1:{port}", "WEB_WORKERS": "1"},
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        assert wait_until(lambda: answers(port), timeout=60)
        status, body = _ready(port)
        assert status == 503 and body["checks"]["schema"].endswith(
            "migrations to apply (the migration Job applies them)"
        ), body
        assert waiter.poll() is None  # still waiting
        subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v0"],
                       cwd=REPO_ROOT, env=env, check=True, timeout=300)  # fmt: skip
        out, _ = waiter.communicate(timeout=60)
        assert waiter.returncode == 0
        assert "waiting for the schema of this version" in out
        assert out.rstrip().endswith("the schema is current")
        assert wait_until(lambda: _ready(port)[0] == 200, timeout=30)
        assert get(port, "/livez")[0] == 200
    finally:
        for proc in (waiter, web):
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=20)
