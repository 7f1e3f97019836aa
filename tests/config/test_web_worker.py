"""The web server's worker process (config/gunicorn.py's PortalWorker): when its arbiter is
killed outright (SIGKILL, as the OOM killer does), nothing tells the worker to stop; it notices
at its next heartbeat and stops itself instead of serving on, orphaned, holding the port."""

from __future__ import annotations

import os
import signal
import subprocess

from tests.config.test_settings_and_stack import _clean_env
from tests.conftest import REPO_ROOT, wait_until
from tests.processes import SERVE, alive, child_pids
from tests.web_server import answers, free_port


def test_a_worker_whose_arbiter_was_killed_stops_itself(tmp_path):
    port = free_port()
    env = _clean_env(
        DEBUG="false", SECRET_KEY="orphan-test-key", SECURE_HTTPS="false",
        QM_VAR_DIR=str(tmp_path), DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
        WEB_BIND=f"127.0.0.1:{port}", WEB_WORKERS="1",
        GUNICORN_CMD_ARGS="--timeout 3",  # the heartbeat: every 3 s instead of 30
    )  # fmt: skip
    web = subprocess.Popen([SERVE, "web"], cwd=REPO_ROOT, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    workers: list[int] = []
    try:
        assert wait_until(lambda: answers(port), timeout=60), "the web server did not start"
        workers = child_pids(web.pid)
        assert len(workers) == 1, workers
        web.send_signal(signal.SIGKILL)
        web.wait(timeout=20)
        assert wait_until(lambda: not alive(workers[0]), timeout=30), (
            "the orphaned worker kept running"
        )
        assert not answers(port)
    finally:
        if web.poll() is None:
            web.kill()
            web.wait(timeout=20)
        for pid in workers:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
