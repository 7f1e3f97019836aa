"""SIGTERM (what Kubernetes sends a pod it stops) makes a Celery worker stop taking tasks and
finish the one it runs before it exits (Celery's warm shutdown): the chart gives workers a
termination grace period long enough for that. A task sent meanwhile stays in the broker for
another worker."""

import os
import signal
import subprocess
import sys

import pytest
import redis
from django.db import connection

from tests.conftest import REPO_ROOT, wait_until


@pytest.mark.slow
def test_sigterm_lets_the_running_task_finish_and_takes_no_new_one(db, settings, tmp_path):
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    broker.flushdb()
    queue = settings.CELERY_TASK_DEFAULT_QUEUE
    params = connection.settings_dict
    env = {
        **os.environ, "QM_VAR_DIR": str(tmp_path),
        "DATABASE_URL": f"postgres://{params['USER']}:{params['PASSWORD']}@{params['HOST']}:"
        f"{params['PORT']}/{params['NAME']}",
    }  # fmt: skip
    log = open(tmp_path / "worker.log", "w")  # noqa: SIM115
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "config", "worker", "--pool", "prefork",
         "--concurrency", "1", "--include", "tests.config.slow_tasks", "--loglevel", "info",
         "--without-heartbeat", "--without-mingle", "--without-gossip"],
        cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        from config.celery import app

        first, second = tmp_path / "first", tmp_path / "second"
        app.send_task("tests.sleep_then_touch", args=[str(first), 4.0])
        assert wait_until(lambda: (tmp_path / "first.started").exists(), timeout=60), (
            tmp_path / "worker.log"
        ).read_text()[-3000:]
        worker.send_signal(signal.SIGTERM)
        app.send_task("tests.sleep_then_touch", args=[str(second), 0.0])
        assert worker.wait(timeout=60) == 0
        # The running task finished; the one sent after SIGTERM was not taken, and waits in the
        # broker for the next worker.
        assert (tmp_path / "first.done").exists()
        assert not (tmp_path / "second.started").exists()
        assert broker.llen(queue) == 1
        assert "warm shutdown" in (tmp_path / "worker.log").read_text().lower()
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(timeout=20)
        log.close()
        broker.flushdb()
