"""The soak test's Celery app: the portal's own app and settings (the embedded default's broker),
with three tasks that write a line per run to the file SOAK_RECORD names, and a beat schedule of
its own (the portal's periodic tasks would need a database and a cluster)."""

import os
import time

from config.celery import app

app.conf.beat_schedule = {"soak-beat": {"task": "soak.beat", "schedule": 0.5}}


def _write(line: str) -> None:
    # One write of a short line with O_APPEND: whole lines, whatever the number of writers.
    fd = os.open(os.environ["SOAK_RECORD"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{line} {os.getpid()}\n".encode())
    finally:
        os.close(fd)


def _busy(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


@app.task(name="soak.record", acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def record(n: int, work: float, pad: str = "") -> None:
    """Idempotent (a line per run; the test counts distinct numbers): acknowledged when done,
    and given back when its process is killed, so it may run twice but is never lost."""
    _busy(work)
    _write(f"record {n}")


@app.task(name="soak.once", ignore_result=True)
def once(n: int) -> None:
    """Not idempotent: acknowledged when it starts, so it never runs twice (one that is running
    when its process is killed is lost)."""
    _write(f"once {n}")


@app.task(name="soak.beat", ignore_result=True)
def beat() -> None:
    _write(f"beat {time.time():.1f}")
