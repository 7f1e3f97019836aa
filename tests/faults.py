"""Real parts to break in fault tests: a throwaway PostgreSQL cluster of the test's own (started
with initdb and pg_ctl on a free port, so stopping it disturbs nobody else's database), and the
portal's web server and Celery worker started on it as deployed (`scripts/serve`, prefork).

The portal's processes talk to the throwaway database; the test reads it through the API, or
with `query()`. Seeding runs in a child process on that database (`seed_portal`)."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import requests

from kubesim.testing import free_port
from tests.conftest import REPO_ROOT, wait_until


def _postgres_binary(name: str) -> str:
    found = shutil.which(name) or next(
        iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None
    )
    if not found:
        pytest.fail(
            f"{name} (PostgreSQL's server programs) is needed to run a throwaway database; "
            "scripts/ensure-test-services.sh installs PostgreSQL"
        )
    return found


class ThrowawayPostgres:
    """A PostgreSQL cluster in a temporary directory, on a free port, that a test may stop and
    start again. initdb refuses to run as root: as root its programs run as `postgres`."""

    def __init__(self):
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="qm-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "postgres.log"
        self._as = []
        if os.geteuid() == 0:
            owner = pwd.getpwnam("postgres")
            os.chown(self.root, owner.pw_uid, owner.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]
        self._run("initdb", "-D", str(self.data), "--auth=trust", "-U", "postgres", "-E", "UTF8",
                  "--no-sync")  # fmt: skip

    def _run(self, program: str, *args: str) -> None:
        subprocess.run(
            [*self._as, _postgres_binary(program), *args],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120,
        )  # fmt: skip

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c max_connections=100"
        )
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.log), "-w",
                  "-t", "60", "start")  # fmt: skip

    def stop(self) -> None:
        """Stop at once, as a restart does: sessions are terminated, open transactions lost."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", "60", "stop")

    def url(self, database: str = "postgres") -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        import psycopg

        with psycopg.connect(self.url().replace("postgres://", "postgresql://"),
                             autocommit=True) as conn:  # fmt: skip
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def remove(self) -> None:
        with contextlib.suppress(subprocess.SubprocessError):
            self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def query(url: str, sql: str, *params) -> list[tuple]:
    """Rows of one query on a database the portal's processes use (not the test's own)."""
    import psycopg

    with psycopg.connect(url.replace("postgres://", "postgresql://"), connect_timeout=3) as conn:
        return conn.execute(sql, params).fetchall()


def portal_env(*, database_url: str, broker_url: str, **extra: str) -> dict:
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "CELERY_BROKER_URL": broker_url,
        "LOG_LEVEL": "INFO",
        # Connections are kept between requests, as deployed, so a restart breaks live ones.
        "CONN_MAX_AGE": "60",
        "EMAIL_BACKEND": "django.core.mail.backends.dummy.EmailBackend",
    }
    env.update(extra)
    return env


SEED = """
import json, sys
import django
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
from django.contrib.auth import get_user_model
from fleet.models import Cluster, GpuModel, NodePool
from queues.models import Department, Membership, PriorityTier, Quota, Team
from queues.services.reconcile import cluster_reconcile
from queues.services.tenancy import api_token_create

cluster = Cluster.objects.create(name="faults", kubeconfig_path=sys.argv[1], is_default=True)
model = GpuModel.objects.create(name="A100-SXM4-80GB")
pool = NodePool.objects.create(cluster=cluster, name="a100", gpu_model=model,
                               node_selector={"accelerator": "nvidia-a100-80gb"})
dept = Department.objects.create(slug="research", name="Research")
team = Team.objects.create(slug="vision", name="Vision", namespace="vision", department=dept)
user = get_user_model().objects.create_user("alice", "alice@example.org", "faults-password")
Membership.objects.create(user=user, team=team, role="member")
PriorityTier.objects.create(name="experiment", value=100, is_default=True)
Quota.objects.create(team=team, pool=pool, nominal_gpus=64, borrowing_limit=0)
cluster_reconcile(cluster_id=cluster.pk)
_, raw = api_token_create(user=user, name="faults")
print(json.dumps({"token": raw, "cluster_id": cluster.pk}))
"""


def seed_portal(env: dict, kubeconfig: str) -> dict:
    """Migrate the portal's database and give it a cluster, a team of one (alice, password
    "faults-password"), a tier, quota and an API token; returns {"token", "cluster_id"}."""
    done = subprocess.run(
        [sys.executable, "-c", SEED, kubeconfig], cwd=REPO_ROOT, env=env, capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip
    if done.returncode:
        pytest.fail(f"seeding the throwaway database failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


class Portal:
    """The portal's web server and a prefork Celery worker (two processes), on `env`."""

    def __init__(self, env: dict, logs: Path, *, worker_concurrency: int = 2,
                 roles: tuple[str, ...] = ("web", "worker")):  # fmt: skip
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.logs = logs
        serve = str(REPO_ROOT / "scripts" / "serve")
        env = {**env, "WEB_BIND": f"127.0.0.1:{self.port}", "WEB_WORKERS": "1",
               "WORKER_CONCURRENCY": str(worker_concurrency),
               "QM_VAR_DIR": str(logs / "var")}  # fmt: skip
        self.procs = {}
        for role in roles:
            out = open(logs / f"{role}.log", "w")  # noqa: SIM115 - closed with the process
            self.procs[role] = (subprocess.Popen([serve, role], cwd=REPO_ROOT, env=env, stdout=out,
                                                 stderr=subprocess.STDOUT), out)  # fmt: skip
        if not wait_until(self._web_up, timeout=60):
            pytest.fail(f"the web server did not start:\n{self.log('web')[-3000:]}")
        if not wait_until(lambda: "ready" in self.log("worker"), timeout=60):
            pytest.fail(f"the worker did not start:\n{self.log('worker')[-3000:]}")

    def _web_up(self) -> bool:
        try:
            return requests.get(f"{self.base}/healthz", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def log(self, role: str) -> str:
        return (self.logs / f"{role}.log").read_text(errors="replace")

    def api(self, token: str) -> requests.Session:
        session = requests.Session()
        session.headers["Authorization"] = f"Bearer {token}"
        return session

    def signed_in(self, username: str, password: str) -> requests.Session:
        """A browser-like session signed in through the login form."""
        session = requests.Session()
        session.get(f"{self.base}/accounts/login/", timeout=10)
        answer = session.post(
            f"{self.base}/accounts/login/",
            data={"username": username, "password": password,
                  "csrfmiddlewaretoken": session.cookies["csrftoken"]},
            headers={"Referer": f"{self.base}/accounts/login/"}, timeout=10,
        )  # fmt: skip
        assert answer.status_code == 200 and "sessionid" in session.cookies, answer.text[:500]
        return session

    def stop(self) -> None:
        for proc, _ in self.procs.values():
            proc.terminate()
        for proc, out in self.procs.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
            out.close()


@contextlib.contextmanager
def prefork_worker(env: dict, log: Path, *, concurrency: int = 2):
    """A real `celery worker` as deployed (prefork, `concurrency` processes) on `env`, its
    output in `log`; yields once it is ready."""
    out = open(log, "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "config", "worker", "--pool", "prefork",
         "--concurrency", str(concurrency), "--loglevel", "info", "--without-heartbeat",
         "--without-mingle", "--without-gossip"],
        cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        if not wait_until(lambda: "ready" in log.read_text(errors="replace"), timeout=60):
            pytest.fail(f"the worker did not start:\n{log.read_text()[-3000:]}")
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        out.close()


def own_database_env(settings) -> dict:
    """The environment of a portal process that uses the test's own database and broker."""
    from django.db import connection

    db = connection.settings_dict
    url = f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    return portal_env(database_url=url, broker_url=settings.CELERY_BROKER_URL)


def wait_for(predicate, timeout: float, interval: float = 0.25) -> float | None:
    """Seconds until predicate() held, or None when it did not within timeout."""
    started = time.monotonic()
    if wait_until(predicate, timeout=timeout, interval=interval):
        return time.monotonic() - started
    return None
