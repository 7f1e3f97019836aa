"""The files of a cluster's state directory, and its components as processes: started detached
in sessions of their own with a log each, recorded (pid and start time, so a reused pid is never
taken for ours) and stopped in the reverse order."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def state_dir(explicit: str | None = None) -> Path:
    """Where a cluster keeps its state: --state, REAL_CLUSTER_DIR, else var/real-cluster."""
    value = explicit or os.environ.get("REAL_CLUSTER_DIR")
    return Path(value).resolve() if value else REPO / "var" / "real-cluster"


@dataclass
class Layout:
    """The files of one cluster under its state directory."""

    root: Path

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig (what tests and the portal use)."""
        return self.root / "kubeconfig"

    @property
    def info(self) -> Path:
        return self.root / "cluster.json"

    def component_dir(self, name: str) -> Path:
        path = self.root / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def kubeconfig_of(self, name: str) -> Path:
        return self.root / "kubeconfigs" / f"{name}.kubeconfig"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start_ticks(pid: int) -> int | None:
    """A live process's start time (clock ticks since boot); None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces; the fields after it are plain.
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] in ("Z", "X"):  # exited, not reaped yet
        return None
    return int(fields[19])


def log_tail(path: str | Path, lines: int = 25) -> str:
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


@dataclass
class Process:
    """A started component: its pid (and start time), command and log."""

    name: str
    pid: int
    ticks: int | None
    log: str
    argv: list[str]
    started: float = 0.0

    def alive(self) -> bool:
        return self.ticks is not None and _start_ticks(self.pid) == self.ticks

    def save(self, layout: Layout) -> None:
        layout.run.mkdir(parents=True, exist_ok=True)
        (layout.run / f"{self.name}.json").write_text(json.dumps(asdict(self), indent=1))

    @classmethod
    def load_all(cls, layout: Layout) -> list[Process]:
        """The processes recorded in a state directory, in the order they were started."""
        out = []
        for path in sorted(layout.run.glob("*.json")) if layout.run.exists() else []:
            try:
                out.append(cls(**json.loads(path.read_text())))
            except (ValueError, TypeError):
                continue
        return sorted(out, key=lambda p: p.started)


def start_process(
    layout: Layout, name: str, argv: list[str], *, cwd: Path, env: dict | None = None
) -> Process:
    """Start a component in a session of its own, detached from the caller, logging to a file."""
    layout.logs.mkdir(parents=True, exist_ok=True)
    log_path = layout.logs / f"{name}.log"
    with open(log_path, "ab") as log:
        log.write(f"\n=== {time.strftime('%Y-%m-%dT%H:%M:%S')} {' '.join(argv)}\n".encode())
        log.flush()
        child = subprocess.Popen(
            argv,
            cwd=cwd,
            env={**os.environ, **(env or {})},
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    process = Process(name, child.pid, _start_ticks(child.pid), str(log_path), argv, time.time())
    process.save(layout)
    return process


def stop_processes(layout: Layout, *, timeout: float = 15.0, log=print) -> None:
    """Stop every component a state directory started, last started first, each before the
    next (the API server before etcd, which it needs to stop cleanly)."""
    for process in reversed(Process.load_all(layout)):
        if not process.alive():
            continue
        _signal(process, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while process.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        if process.alive():
            log(f"{process.name} (pid {process.pid}) did not stop in {timeout:.0f} s: killed")
            _signal(process, signal.SIGKILL)
            while process.alive():
                time.sleep(0.05)
    if layout.run.exists():
        shutil.rmtree(layout.run)


def _signal(process: Process, signum: int) -> None:
    """Signal a component's process group (it runs in a session of its own)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signum)
