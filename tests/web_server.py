"""The real web server as `scripts/serve web` runs it, on the test database, for tests that need
it in another process (add `transactional_db` so that it sees their rows)."""

import contextlib
import http.client
import os
import socket
import subprocess

from django.db import connection

from tests.conftest import REPO_ROOT, wait_until


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def web_server(tmp_path, **env):
    """`scripts/serve web` (two workers, four threads each) on the test database."""
    db = connection.settings_dict
    port = free_port()
    environment = {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT']}/"
        f"{db['NAME']}",
        "WEB_BIND": f"127.0.0.1:{port}", "WEB_WORKERS": "2", "WEB_THREADS": "4",
        "QM_VAR_DIR": str(tmp_path), **{k: str(v) for k, v in env.items()},
    }  # fmt: skip
    log = open(tmp_path / f"web-{port}.log", "w")  # noqa: SIM115
    server = subprocess.Popen(
        [str(REPO_ROOT / "scripts" / "serve"), "web"], cwd=REPO_ROOT, env=environment,
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:

        def up():
            try:
                return get(port, "/healthz", timeout=2)[0] in (200, 503)
            except OSError:
                return False

        assert wait_until(up, timeout=60), (tmp_path / f"web-{port}.log").read_text()[-3000:]
        yield port
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def answers(port) -> bool:
    """Whether a web server on `port` answers /livez."""
    try:
        return get(port, "/livez", timeout=2)[0] == 200
    except OSError:
        return False


def get(port, path, *, token=None, timeout=10.0):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
        answer = conn.getresponse()
        return answer.status, answer.read(), dict(answer.getheaders())
    finally:
        conn.close()
