"""scripts/supervise.py, what `make run` runs the Procfile with: one process's end does not take
the others down; it is said what ended and why, and it is started again with backoff; Ctrl-C
stops everything, what the processes started themselves included."""

import json
import os
import signal
import subprocess
import sys

from tests.conftest import REPO_ROOT, wait_until
from tests.processes import alive


def _events(path):
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_killed_process_is_reported_and_restarted_and_ctrl_c_stops_all(tmp_path):
    child_pid_file = tmp_path / "grandchild.pid"
    procfile = tmp_path / "Procfile"
    procfile.write_text(
        "ticker: sh -c 'while true; do echo tick; sleep 0.2; done'\n"
        # A process with a child of its own (as a Celery worker has pool processes).
        f"parent: sh -c 'sleep 300 & echo $! > {child_pid_file}; echo parent up; wait'\n"
        "failing: sh -c 'echo cannot start: no such thing >&2; exit 3'\n"
    )
    events = tmp_path / "events.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "scripts/supervise.py", "-f", str(procfile), "--events", str(events),
         "--backoff-max", "4"],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        assert wait_until(lambda: child_pid_file.exists() and child_pid_file.read_text().strip())
        starts = {e["name"]: e["pid"] for e in _events(events) if e["event"] == "start"}
        ticker, parent = starts["ticker"], starts["parent"]
        grandchild = int(child_pid_file.read_text())
        os.kill(parent, signal.SIGKILL)
        assert wait_until(
            lambda: [e for e in _events(events) if e["event"] == "start" and e["name"] == "parent"
                     and e["pid"] != parent], timeout=15)  # fmt: skip
        # What the killed process left in its group was stopped with it; the ticker runs on.
        assert wait_until(lambda: not alive(grandchild), timeout=10)
        assert alive(ticker)
        # The failing process is tried again and again, further apart each time.
        assert wait_until(
            lambda: len([e for e in _events(events) if e["name"] == "failing"
                         and e["event"] == "exit"]) >= 3, timeout=20)  # fmt: skip
        pauses = [e["restart_in"] for e in _events(events)
                  if e["name"] == "failing" and e["event"] == "exit"]  # fmt: skip
        assert pauses[:3] == [1, 2, 4]
        live = [e["pid"] for e in _events(events) if e["event"] == "start"]
        newest = int(child_pid_file.read_text())
        proc.send_signal(signal.SIGINT)
        output = proc.communicate(timeout=30)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    assert f"parent (pid {parent}) was killed by SIGKILL after" in output
    assert "failing (pid" in output and "exited with code 3" in output
    assert "failing's last lines:" in output and "cannot start: no such thing" in output
    assert "ticker    | tick" in output
    assert wait_until(lambda: not any(alive(pid) for pid in [*live, newest]), timeout=10)


def test_names_run_only_those_processes_and_an_unknown_name_is_refused(tmp_path):
    """`make run` names the processes it wants (the demo's OpenID provider only with SSO=1)."""
    procfile = tmp_path / "Procfile"
    procfile.write_text("one: sh -c 'echo one up; sleep 300'\n"
                        "two: sh -c 'echo two up; sleep 300'\n")  # fmt: skip
    events = tmp_path / "events.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "scripts/supervise.py", "-f", str(procfile), "--events", str(events),
         "two"],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        assert wait_until(lambda: any(e["event"] == "start" for e in _events(events)))
        proc.send_signal(signal.SIGINT)
        output = proc.communicate(timeout=30)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    assert {e["name"] for e in _events(events) if e["event"] == "start"} == {"two"}
    assert "one up" not in output
    refused = subprocess.run(
        [sys.executable, "scripts/supervise.py", "-f", str(procfile), "three"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert refused.returncode == 2 and "has no process three" in refused.stderr
