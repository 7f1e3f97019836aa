"""Soak: the embedded default's broker, a real Celery worker (prefork, two pool processes) and
beat, run by scripts/supervise.py as `make run` runs them, through thousands of messages while a
CPU hog competes with them, with pool processes, the worker and beat killed in the middle.

Every idempotent message is processed (some twice: acknowledged late, given back by a killed
process); no message that is acknowledged early runs twice, and of those only ones running at a
kill are lost; beat goes on ticking; the supervisor restarted the worker and beat once each (the
worker got over its killed pool processes by itself) and the worker answers a ping at the end.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from celery import Celery
from kombu import Connection

from config.celery import app
from tests.conftest import REPO_ROOT, wait_until
from tests.processes import child_pids

RECORDS, ONCE = 3000, 300


def _events(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def _pid_of(events_file: Path, name: str) -> int:
    starts = [e for e in _events(events_file) if e["event"] == "start" and e["name"] == name]
    return starts[-1]["pid"]


def _lines(record: Path) -> list[list[str]]:
    if not record.exists():
        return []
    return [line.split() for line in record.read_text().splitlines() if line]


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_the_embedded_default_survives_thousands_of_messages_and_killed_processes(
    tmp_path, monkeypatch
):
    var, record, events = tmp_path / "var", tmp_path / "record.log", tmp_path / "events.jsonl"
    env = {k: v for k, v in os.environ.items() if k not in ("CELERY_BROKER_URL", "DATABASE_URL")}
    env.update(QM_VAR_DIR=str(var), SOAK_RECORD=str(record), DEBUG="false",
               SECRET_KEY="soak-test-secret-key")  # fmt: skip
    python = sys.executable
    procfile = tmp_path / "Procfile"
    procfile.write_text(
        f"worker: {python} -m celery -A tests.config.soak_app worker --pool prefork "
        "--concurrency 2 --loglevel info\n"
        f"beat: {python} -m celery -A tests.config.soak_app beat --loglevel info "
        f"-s {tmp_path / 'beat-schedule'}\n"
    )
    # The embedded default's broker URL, as settings derive it from QM_VAR_DIR.
    broker = f"sqlite:///{var / 'broker.sqlite3'}"
    output = open(tmp_path / "supervise.log", "w")  # noqa: SIM115
    supervisor = subprocess.Popen(
        [python, "scripts/supervise.py", "-f", str(procfile), "--events", str(events)],
        cwd=REPO_ROOT, env=env, stdout=output, stderr=subprocess.STDOUT,
    )  # fmt: skip
    hog = subprocess.Popen([python, "-c", "import time\nend = time.time() + 300\n"
                            "while time.time() < end: pass"])  # fmt: skip
    kills: list[str] = []
    try:
        assert wait_until(lambda: any(r[0] == "beat" for r in _lines(record)), timeout=60), (
            tmp_path / "supervise.log"
        ).read_text()[-3000:]

        def produce():
            with Connection(broker) as conn:
                for i in range(RECORDS):
                    app.send_task("soak.record", args=[i, 0.002, "x" * 8000], connection=conn)
                    if i % 10 == 0:
                        app.send_task("soak.once", args=[i // 10], connection=conn)
                    if i % 200 == 199:
                        time.sleep(0.5)

        producer = threading.Thread(target=produce)
        producer.start()

        def processed() -> int:
            return len({r[1] for r in _lines(record) if r[0] == "record"})

        def at(share: float):
            assert wait_until(lambda: processed() >= share * RECORDS, timeout=120), (
                f"stuck at {processed()} of {RECORDS}; "
                + (tmp_path / "supervise.log").read_text()[-3000:]
            )

        def kill_pool():
            pool = child_pids(_pid_of(events, "worker"))
            assert len(pool) == 2, pool
            for pid in pool:  # both at once, as in the report
                os.kill(pid, signal.SIGKILL)
            kills.append("pool")

        at(0.15)
        kill_pool()
        at(0.40)
        os.kill(_pid_of(events, "worker"), signal.SIGKILL)
        kills.append("worker")
        at(0.55)
        os.kill(_pid_of(events, "beat"), signal.SIGKILL)
        kills.append("beat")
        at(0.75)
        kill_pool()
        producer.join(timeout=120)
        at(1.0)
        time.sleep(3)  # the last `once` messages, and a few beat ticks after everything
        # (A Celery app of its own: control messages go through the app's own broker, which
        # CELERY_BROKER_URL overrides, so without it while the probe pings.)
        with monkeypatch.context() as env_now:
            env_now.delenv("CELERY_BROKER_URL", raising=False)
            probe = Celery("soak-probe", broker=broker)
            replies = probe.control.ping(timeout=5)
            probe.close()
        assert replies and all("ok" in r for reply in replies for r in reply.values())
    finally:
        hog.kill()
        supervisor.send_signal(signal.SIGINT)
        try:
            supervisor.wait(timeout=60)
        finally:
            if supervisor.poll() is None:
                supervisor.kill()
            output.close()
    log = (tmp_path / "supervise.log").read_text()
    lines = _lines(record)

    done = Counter(int(r[1]) for r in lines if r[0] == "record")
    assert set(done) == set(range(RECORDS)), "idempotent messages lost"
    once = Counter(int(r[1]) for r in lines if r[0] == "once")
    assert max(once.values()) == 1, "a message acknowledged early ran twice"
    # Only those running when a worker or pool process was killed (two at a time) may be lost.
    lost = ONCE - len(once)
    assert lost <= 2 * len([k for k in kills if k != "beat"]), lost
    # The pool processes that were killed were replaced (more than two pids did the work).
    assert len({r[2] for r in lines if r[0] == "record"}) > 4
    # Beat kept ticking through it all, and still does at the end.
    ticks = sorted(float(r[1]) for r in lines if r[0] == "beat")
    assert ticks[-1] > time.time() - 10
    # The supervisor restarted what was killed, once each, and nothing else died.
    exits = [(e["name"], e["returncode"]) for e in _events(events) if e["event"] == "exit"]
    assert sorted(exits) == [("beat", -9), ("worker", -9)], (exits, log[-3000:])
    assert "worker (pid" in log and "was killed by SIGKILL" in log
    # No error but the tasks lost with the killed pool processes (Celery's WorkerLostError).
    assert "JSONDecodeError" not in log and "Unrecoverable error" not in log
    assert log.count("Traceback (most recent call last)") == log.count("raise WorkerLostError(")
    print(
        f"\nsoak: {RECORDS} idempotent messages ({sum(done.values()) - RECORDS} run twice), "
        f"{ONCE} acknowledged early ({lost} lost to kills), {len(ticks)} beat ticks, kills: {kills}"
    )
