"""The worker survives its broker: a real Redis is stopped under a real Celery worker while
messages are unacknowledged, started again, and the worker goes on taking work."""

import os
import shutil
import subprocess
import sys
import time
import uuid

import pytest
import redis

from core.models import WorkerHeartbeat
from tests.config.test_settings_and_stack import _free_port
from tests.conftest import REPO_ROOT, wait_until


def _start_redis(port: int, workdir) -> None:
    subprocess.run(
        [
            shutil.which("redis-server"),
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "yes",
            "--dir",
            str(workdir),
            "--logfile",
            str(workdir / "redis.log"),
        ],  # fmt: skip
        check=True,
    )
    assert wait_until(lambda: _ping(port), timeout=10), "redis did not start"


def _ping(port: int) -> bool:
    try:
        return redis.Redis(port=port, socket_timeout=1).ping()
    except redis.ConnectionError:
        return False


@pytest.mark.slow
@pytest.mark.parametrize("outage_seconds", [15])
def test_the_worker_takes_work_again_after_its_broker_restarts(
    transactional_db, tmp_path, outage_seconds
):
    from django.conf import settings
    from django.db import connection

    port = _free_port()
    _start_redis(port, tmp_path)
    broker = f"redis://127.0.0.1:{port}/0"
    db = connection.settings_dict
    env = {
        **os.environ,
        "CELERY_BROKER_URL": broker,
        "DATABASE_URL": f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT']}/"
        f"{db['NAME']}",
    }
    log = open(tmp_path / "worker.log", "w")  # noqa: SIM115 - closed below
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "config", "worker", "-I",
         "tests.config.broker_tasks", "--pool", "prefork", "--concurrency", "2",
         "--loglevel", "info"],  # fmt: skip
        cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        from celery import Celery

        # Not Celery(broker=...): the suite's CELERY_BROKER_URL would win over the argument.
        # Not the current app either: the portal's tasks are sent by the current app (the
        # portal's, config.celery), and later tests must not send theirs through this one.
        sender = Celery(set_as_current=False)
        queue = settings.CELERY_TASK_DEFAULT_QUEUE

        def send(name, **kwargs):
            with sender.connection_for_write(url=broker) as conn:
                sender.send_task(name, queue=queue, connection=conn, **kwargs)

        assert wait_until(lambda: "ready" in (tmp_path / "worker.log").read_text(), timeout=60)
        for _ in range(4):  # two run, two wait prefetched: all unacknowledged
            send("tests.hold_message", args=[8])

        def held():
            return (tmp_path / "worker.log").read_text().count("received") >= 4

        assert wait_until(held, timeout=30), "the worker never took the messages"
        redis.Redis(port=port).shutdown(nosave=True)
        time.sleep(outage_seconds)
        _start_redis(port, tmp_path)

        nonce = uuid.uuid4().hex
        send("fleet.heartbeat", kwargs={"nonce": nonce})
        arrived = wait_until(
            lambda: WorkerHeartbeat.objects.filter(nonce=nonce).exists(), timeout=60
        )
        output = (tmp_path / "worker.log").read_text()
        assert worker.poll() is None, f"the worker died:\n{output[-3000:]}"
        assert arrived, f"the worker took no work after the restart:\n{output[-3000:]}"
        assert "Unrecoverable error" not in output
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            worker.kill()
        log.close()
        if _ping(port):
            redis.Redis(port=port).shutdown(nosave=True)
