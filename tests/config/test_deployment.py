"""Deployment hardening: `check --deploy` is clean with the documented production settings, the
image leaves secrets and local state out, and /metrics adds up every gunicorn worker."""

import os
import re
import secrets
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from tests.config.test_settings_and_stack import _clean_env, _free_port
from tests.conftest import REPO_ROOT

# The production settings README documents (besides DATABASE_URL, CELERY_BROKER_URL, ...).
PRODUCTION = {
    "DEBUG": "false",
    "ALLOWED_HOSTS": "quartermaster.example.org",
    "SECURE_PROXY_SSL_HEADER": "HTTP_X_FORWARDED_PROTO",
    "SECURE_HSTS_PRELOAD": "true",
}


def test_check_deploy_is_clean_with_the_production_settings(tmp_path):
    env = _clean_env(**PRODUCTION, SECRET_KEY=secrets.token_urlsafe(50), QM_VAR_DIR=str(tmp_path))
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_the_image_leaves_secrets_state_and_history_out():
    ignored = {
        line.strip() for line in (REPO_ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }  # fmt: skip
    assert {".env", "var/", ".git/", ".venv/"} <= ignored


def _get(url, token=None):
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=5) as response:
        return response.read().decode()


def _requests_total(text: str) -> float:
    return sum(
        float(m.group(1))
        for m in re.finditer(r"^quartermaster_http_requests_total\{[^}]*\} (\S+)$", text, re.M)
    )


@pytest.mark.slow
def test_metrics_add_up_every_worker_and_can_ask_for_a_token(tmp_path):
    env = _clean_env(
        DEBUG="false", SECRET_KEY="metrics-test-key", SECURE_HTTPS="false",
        QM_VAR_DIR=str(tmp_path), METRICS_TOKEN="scrape-me",
    )  # fmt: skip
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v0"], cwd=REPO_ROOT,
                   env=env, check=True, timeout=180)  # fmt: skip
    port = _free_port()
    server = subprocess.Popen(
        [str(REPO_ROOT / "scripts" / "serve"), "web"],
        cwd=REPO_ROOT,
        env={
            **env,
            "WEB_BIND": f"127.0.0.1:{port}",
            "WEB_WORKERS": "2",
            "WEB_THREADS": "1",
            "WEB_KEEPALIVE": "0",
        },  # fmt: skip
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                _get(f"{base}/healthz")
                break
            except OSError:
                time.sleep(0.5)
        with pytest.raises(urllib.error.HTTPError) as refused:
            _get(f"{base}/metrics")
        assert refused.value.code == 401
        for _ in range(40):
            _get(f"{base}/healthz")
        # Each scrape lands on one worker or the other; every one sees both workers' counts.
        totals = [_requests_total(_get(f"{base}/metrics", token="scrape-me")) for _ in range(6)]
        assert min(totals) >= 40, totals
        assert totals == sorted(totals), totals
        pids = set(os.listdir(tmp_path / "prometheus-web"))
        assert len({re.sub(r"\D", "", p) for p in pids}) >= 2, pids  # files of two workers
    finally:
        server.terminate()
        server.wait(timeout=15)
