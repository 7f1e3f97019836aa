"""What lets the suite run in several processes (pytest-xdist, `make test`'s TEST_WORKERS).

Each worker process has its own test database (pytest-django names it after the worker), its
own kubesims (tests/fixtures_cluster.py) and, here, its own Redis: the tests that run a Celery
worker empty the broker first and would otherwise take or drop another process's messages, and
a message sent by one process's test would be run by another's worker against the wrong
database. Each worker starts a private redis-server on a free port (the broker URL's database
number kept) and points the broker, the Redis-cache tests and every subprocess at it; a run in
one process uses the broker it is given, as before.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from urllib.parse import urlsplit

import pytest

_REDIS: subprocess.Popen | None = None


def _private_redis() -> tuple[subprocess.Popen, int]:
    import redis

    from kubesim.testing import free_port

    binary = shutil.which("redis-server")
    if binary is None:
        raise pytest.UsageError(
            "Tests in several processes need redis-server (scripts/ensure-test-services.sh)"
        )
    for _ in range(5):  # a free port may be taken before the server binds it: try another
        port = free_port()
        proc = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                if redis.Redis(port=port, socket_timeout=1).ping():
                    return proc, port
            except redis.ConnectionError:
                time.sleep(0.05)
        proc.kill()
        proc.wait()
    raise pytest.UsageError("Could not start a private redis-server for this test worker")


def pytest_configure(config):
    global _REDIS
    from django.conf import settings

    broker = urlsplit(settings.CELERY_BROKER_URL)
    if not os.environ.get("PYTEST_XDIST_WORKER") or broker.scheme != "redis":
        return
    _REDIS, port = _private_redis()
    url = f"redis://127.0.0.1:{port}{broker.path}"
    # Celery reads the broker from the environment before its settings (and subprocesses
    # inherit it); the views and fixtures read Django's setting.
    os.environ["CELERY_BROKER_URL"] = url
    settings.CELERY_BROKER_URL = url


def pytest_unconfigure(config):
    if _REDIS is not None:
        _REDIS.terminate()
        try:
            _REDIS.wait(timeout=10)
        except subprocess.TimeoutExpired:
            _REDIS.kill()
