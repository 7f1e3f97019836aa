"""Start-up settings, the embedded default, and the compose stack's consistency."""

import os
import shlex
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO_ROOT

ENV_KEYS_TO_DROP = (
    "DATABASE_URL", "CELERY_BROKER_URL", "SECRET_KEY", "DEBUG", "SECURE_HTTPS",
    "DJANGO_ALLOW_ASYNC_UNSAFE",  # set by the browser tests for their own process
)  # fmt: skip


def _clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ENV_KEYS_TO_DROP}
    env.update(extra)
    return env


def test_missing_secret_key_stops_startup_with_clear_message(tmp_path):
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=REPO_ROOT,
        env=_clean_env(DEBUG="false", QM_VAR_DIR=str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "SECRET_KEY is not set" in result.stderr


def _free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_embedded_default_boots_with_sqlite_and_local_broker(tmp_path):
    env = _clean_env(DEBUG="true", QM_VAR_DIR=str(tmp_path))
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django; django.setup(); from django.conf import settings; "
            "print(settings.DATABASES['default']['ENGINE'], settings.CELERY_BROKER_URL)",
        ],
        cwd=REPO_ROOT,
        env={**env, "DJANGO_SETTINGS_MODULE": "config.settings"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    engine, broker = probe.stdout.split()
    assert engine == "django.db.backends.sqlite3", probe.stderr
    # The broker is a SQLite file of its own under var/ (config/broker.py).
    assert broker == f"sqlite:///{tmp_path / 'broker.sqlite3'}"
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v0"],
        cwd=REPO_ROOT,
        env=env,
        check=True,
        timeout=120,
    )
    port = _free_port()
    server = subprocess.Popen(
        [str(REPO_ROOT / "scripts" / "serve"), "web"],
        cwd=REPO_ROOT,
        env={**env, "WEB_BIND": f"127.0.0.1:{port}", "WEB_WORKERS": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        body = None
        for _ in range(60):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                    assert r.status == 200
                    body = r.read().decode()
                    break
            except OSError:
                time.sleep(0.5)
        assert body is not None, "the portal did not answer /healthz"
        assert '"database": "ok"' in body and '"broker": "ok"' in body
        assert (Path(tmp_path) / "quartermaster.sqlite3").exists()
        assert (Path(tmp_path) / "broker.sqlite3").exists()
    finally:
        server.terminate()
        server.wait(timeout=15)


def _procfile():
    entries = {}
    for line in (REPO_ROOT / "Procfile").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, command = line.split(":", 1)
            entries[name.strip()] = shlex.split(command)
    return entries


def test_compose_file_names_services_and_matches_procfile():
    compose = yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"postgres", "redis", "prometheus", "kubesim", "web", "worker", "beat"} <= set(services)
    procfile = _procfile()
    for name in ("web", "worker", "beat", "kubesim"):
        assert services[name]["command"] == procfile[name], name
        assert services[name]["build"] == "." and services[name]["image"] == "quartermaster:latest"
        env = services[name]["environment"]
        assert env["DATABASE_URL"].startswith("postgres://")
        assert env["CELERY_BROKER_URL"].startswith("redis://")
    assert (REPO_ROOT / "Dockerfile").exists()
    # Every app service reads the kubeconfig kubesim writes into their shared volume.
    assert services["kubesim"]["environment"]["KUBESIM_ADVERTISE_URL"] == "http://kubesim:6443"
    for name in ("web", "worker", "beat"):
        assert services[name]["environment"]["KUBECONFIG"] == "/app/var/kubesim/kubeconfig"
        assert "kubesim:/app/var/kubesim" in services[name]["volumes"]
    # A dead worker (or beat, or web) comes back by itself; the worker is checked by a ping.
    for name in ("web", "worker", "beat"):
        assert services[name]["restart"] == "unless-stopped", name
    assert "inspect ping" in " ".join(services["worker"]["healthcheck"]["test"])
    # Prometheus scrapes the portal as "web": the portal must accept that host.
    assert "web" in services["web"]["environment"]["ALLOWED_HOSTS"].split(",")
    prometheus = yaml.safe_load((REPO_ROOT / "deploy" / "prometheus.yml").read_text())
    targets = {c["job_name"]: c for c in prometheus["scrape_configs"]}
    assert targets["dcgm"]["static_configs"][0]["targets"] == ["kubesim:6443"]


def test_procfile_commands_exist_and_serve_knows_them():
    serve = (REPO_ROOT / "scripts" / "serve").read_text()
    for command in _procfile().values():
        program = REPO_ROOT / command[0]
        assert program.exists() and os.access(program, os.X_OK), command
        if command[0] == "scripts/serve":
            assert f"  {command[1]})" in serve, f"scripts/serve has no '{command[1]}' case"


@pytest.mark.slow
def test_procfile_kubesim_serves_and_writes_the_advertised_kubeconfig(tmp_path):
    port = _free_port()
    env = _clean_env(
        QM_VAR_DIR=str(tmp_path),
        KUBESIM_PORT=str(port),
        KUBESIM_ADVERTISE_URL="http://kubesim:6443",
    )
    proc = subprocess.Popen(
        [str(REPO_ROOT / "scripts" / "serve"), "kubesim"],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    kubeconfig = tmp_path / "kubesim" / "kubeconfig"
    try:
        version = None
        for _ in range(60):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/version", timeout=2) as r:
                    version = r.read().decode()
                    break
            except OSError:
                time.sleep(0.5)
        assert version and "kubesim" in version
        config = yaml.safe_load(kubeconfig.read_text())
        assert config["clusters"][0]["cluster"]["server"] == "http://kubesim:6443"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/nodes", timeout=5) as r:
            assert len(yaml.safe_load(r.read())["items"]) > 0
    finally:
        proc.terminate()
        proc.wait(timeout=15)
    assert (tmp_path / "kubesim" / "state.json").exists()
