"""What Kubernetes' probes ask of the portal's processes: alive (the process answers) apart from
ready (it can do its work: the database and the broker answer, the schema is the one of its
version). An outage of the database or the broker makes a process not ready; it never makes it
look dead, so no healthy process is restarted for it.

Web answers /livez and /readyz (core/views.py). Workers and beat serve no HTTP: a thread of
their main process writes files in QM_VAR_DIR/probes/ that the chart's exec probes read
(`scripts/serve probe alive|ready`): `alive` every ALIVE_EVERY seconds whatever the database and
broker do, and for workers `ready`, first line "ok" while every check passes, else "not ready"
and what failed. A process whose interpreter hangs stops writing both."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from celery import current_app
from django.conf import settings

logger = logging.getLogger(__name__)

ALIVE_EVERY = 5.0
READY_EVERY = 5.0
# The schema is checked until it is current, then never again: it does not go back.
_schema = {"current": False}


class SchemaBehind(Exception):
    """Migrations of this version are not applied yet."""


def check_database() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()


def check_broker() -> None:
    with current_app.connection_for_write(url=settings.CELERY_BROKER_URL) as conn:
        conn.ensure_connection(max_retries=1, timeout=2)


def check_schema() -> None:
    """Raise SchemaBehind while migrations of this code are unapplied (what `manage.py migrate
    --check` says)."""
    if _schema["current"]:
        return
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connection)
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if plan:
        raise SchemaBehind(f"{len(plan)} migrations to apply (the migration Job applies them)")
    _schema["current"] = True


def readiness() -> dict[str, str]:
    """Each check's outcome: "ok", or what failed. The schema is not asked without a database."""
    checks = {}
    for name, check in (("database", check_database), ("broker", check_broker)):
        try:
            check()
            checks[name] = "ok"
        except Exception as exc:  # noqa: BLE001 - any failure means not ready
            checks[name] = f"error: {exc.__class__.__name__}"
            if name == "database":
                from core.outage import forget_broken_connections

                forget_broken_connections()
    if checks["database"] == "ok":
        try:
            check_schema()
            checks["schema"] = "ok"
        except SchemaBehind as exc:
            checks["schema"] = str(exc)
        except Exception as exc:  # noqa: BLE001
            checks["schema"] = f"error: {exc.__class__.__name__}"
    else:
        checks["schema"] = "unknown"
    return checks


def probe_dir() -> Path:
    return Path(settings.VAR_DIR) / "probes"


def _write(path: Path, text: str) -> None:
    # Written beside and renamed: a probe never reads half a file.
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(text)
    partial.replace(path)


def _keep_alive(path: Path, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            _write(path, f"ok\npid {os.getpid()}\n")
        except OSError as exc:
            logger.warning("probe: cannot write %s: %s", path, exc)
        stop.wait(ALIVE_EVERY)


def _keep_ready(path: Path, stop: threading.Event) -> None:
    from django.db import connection

    while not stop.is_set():
        try:
            checks = readiness()
        finally:
            # A connection of this thread only: none is kept between checks (nor handed to a
            # pool process forked meanwhile).
            connection.close()
        failed = {k: v for k, v in checks.items() if v != "ok"}
        if failed:
            logger.warning("probe: not ready: %s", failed)
        lines = ["not ready" if failed else "ok"] + [f"{k}: {v}" for k, v in checks.items()]
        try:
            _write(path, "\n".join(lines) + "\n")
        except OSError as exc:
            logger.warning("probe: cannot write %s: %s", path, exc)
        stop.wait(READY_EVERY)


def start_probe_files(*, ready: bool) -> threading.Event:
    """Start the threads that keep this process's probe files fresh; set the event to stop."""
    directory = probe_dir()
    directory.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    targets = [(_keep_alive, directory / "alive")]
    if ready:
        targets.append((_keep_ready, directory / "ready"))
    for target, path in targets:
        path.unlink(missing_ok=True)
        threading.Thread(
            target=target, args=(path, stop), daemon=True, name=f"probe-{path.name}"
        ).start()
    return stop


def _worker_started(**_signal) -> None:
    start_probe_files(ready=True)


def _beat_started(**_signal) -> None:
    start_probe_files(ready=False)


def connect() -> None:
    """Start the probe threads in each Celery worker's and beat's main process."""
    from celery.signals import beat_init, worker_init

    worker_init.connect(_worker_started, weak=False, dispatch_uid="core-probe-files-worker")
    beat_init.connect(_beat_started, weak=False, dispatch_uid="core-probe-files-beat")
