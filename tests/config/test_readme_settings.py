"""Every setting in the README's table is read where the table says, and those whose effect is
not tested elsewhere do what it says."""

import re
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

REPO = Path(__file__).resolve().parents[2]
# Read by the process scripts and Make, not by Django's settings.
SCRIPT_SETTINGS = {
    "WEB_BIND", "WEB_WORKERS", "WEB_THREADS", "WEB_KEEPALIVE", "WORKER_POOL",
    "WORKER_CONCURRENCY", "KUBESIM_FLEET", "KUBESIM_TIME_SCALE", "KUBESIM_ADVERTISE_URL",
    "KUBESIM_FAIR_SHARING", "KUBESIM_ADMISSION_FAIR_SHARING", "OIDC_DEMO_PORT",
    "LOG_LEVEL", "QM_SHARED_DIR",
}  # fmt: skip


def _table_settings() -> list[str]:
    readme = (REPO / "README.md").read_text()
    table = readme.split("| variable | default | meaning |", 1)[1].split("\n\n", 1)[0]
    names = []
    for row in table.splitlines()[2:]:
        names += re.findall(r"`([A-Z][A-Z0-9_]+)`", row.split("|")[1])
    return names


def test_the_readme_table_names_only_settings_that_are_read():
    names = _table_settings()
    assert len(names) > 40
    settings_py = (REPO / "config" / "settings.py").read_text()
    scripts = (REPO / "scripts" / "serve").read_text() + (REPO / "Makefile").read_text()
    for name in names:
        where = scripts if name in SCRIPT_SETTINGS else settings_py
        assert f'"{name}"' in where or f"{name}:" in where or f"${{{name}" in where, (
            f"{name} is in the README's table but not read by "
            + ("scripts/serve or the Makefile" if name in SCRIPT_SETTINGS else "config/settings.py")
        )


def test_kubeconfig_is_registered_at_start_up_once(db, tmp_path, settings):
    from fleet.models import Cluster
    from fleet.services.clusters import cluster_register_from_settings

    path = tmp_path / "prod.kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: gpu-east\n"
        "clusters: [{name: east, cluster: {server: 'https://10.0.0.1:6443'}}]\n"
        "contexts: [{name: gpu-east, context: {cluster: east, user: admin}}]\n"
        "users: [{name: admin, user: {token: x}}]\n"
    )
    settings.KUBECONFIG, settings.KUBE_CONTEXT = str(path), "gpu-east"
    cluster, said = cluster_register_from_settings()
    assert said == f"registered cluster gpu-east from {path}"
    assert (cluster.name, cluster.context, cluster.is_default) == ("gpu-east", "gpu-east", True)
    again, said = cluster_register_from_settings()
    assert again.pk == cluster.pk and "already" in said
    assert Cluster.objects.count() == 1
    settings.KUBE_CONTEXT = "nope"
    assert cluster_register_from_settings()[0] is None
    settings.KUBECONFIG = str(tmp_path / "missing")
    assert cluster_register_from_settings() == (None, f"no kubeconfig at {tmp_path / 'missing'}; "
                                                "nothing registered")  # fmt: skip


def test_the_register_cluster_command_runs_in_serve_migrate():
    serve = (REPO / "scripts" / "serve").read_text()
    assert "manage.py migrate --noinput" in serve and "manage.py register_cluster" in serve
    compose = (REPO / "docker-compose.yml").read_text()
    assert '["scripts/serve", "migrate"]' in compose
    out = subprocess.run(
        [sys.executable, "manage.py", "help", "register_cluster"], cwd=REPO,
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert out.returncode == 0 and "KUBECONFIG" in out.stdout


@pytest.mark.parametrize(
    "source, prometheus_url, scrapes, ingests",
    [
        ("auto", "", True, False),
        ("auto", "http://prometheus:9090", False, True),
        ("scrape", "http://prometheus:9090", True, False),  # obeyed, though Prometheus is set
        ("prometheus", "http://prometheus:9090", False, True),
    ],
)
def test_billing_source_picks_exactly_one_source(
    db, settings, monkeypatch, source, prometheus_url, scrapes, ingests
):
    from billing import tasks
    from tests.queues.builders import make_cluster

    make_cluster()
    settings.BILLING_SOURCE, settings.PROMETHEUS_URL = source, prometheus_url
    settings.DCGM_SCRAPE_URLS = ["http://exporter:9400/metrics"]
    calls = []
    monkeypatch.setattr(tasks.dcgm, "scrape", lambda url: calls.append("scrape") or [])
    monkeypatch.setattr(tasks, "usage_scrape_record", lambda **kw: 0)
    monkeypatch.setattr(
        tasks, "hours_missing", lambda **kw: [timezone.now().replace(minute=0) - timedelta(hours=1)]
    )
    monkeypatch.setattr(tasks, "usage_hour_ingest", lambda **kw: calls.append("ingest"))
    tasks.scrape_dcgm.apply()
    tasks.ingest_hours.apply()
    assert ("scrape" in calls) is scrapes
    assert ("ingest" in calls) is ingests
