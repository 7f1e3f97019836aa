"""Run the processes of a Procfile in one console, and keep them running (what `make run` uses).

    python scripts/supervise.py [-f Procfile] [--events FILE] [NAME ...]

Each line of output is prefixed with the time and the process's name, as honcho prints it. When
a process ends, the others go on: the supervisor says which one ended and why (its exit code or
the signal that killed it, how long it ran, its last lines), stops whatever it left behind in
its process group (a Celery worker's pool processes, say), and starts it again after a pause
that doubles with each quick failure (1 s, 2 s, 4 s ... at most `--backoff-max`; a process that
ran `--stable-after` seconds starts from 1 s again). Ctrl-C (or SIGTERM) stops every process:
SIGTERM to each process group, SIGKILL to what is left after `--stop-timeout` seconds.

`--events FILE` appends one JSON line per start and exit (for tests and scripts). Names run
only those of the Procfile's processes (`make run` leaves the demo's OpenID provider out unless
SSO=1); none runs them all.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

COLOURS = ["36", "33", "32", "35", "34", "31", "96", "93"]
SELF = "supervise"


@dataclass
class Service:
    name: str
    command: str
    colour: str
    proc: subprocess.Popen | None = None
    started_at: float = 0.0
    restarts: int = 0
    quick_failures: int = 0
    start_at: float = 0.0  # when a stopped service is due to start again
    last_lines: collections.deque = field(default_factory=lambda: collections.deque(maxlen=15))


class Console:
    """One writer for every process's lines, each prefixed with the time and a name."""

    def __init__(self, names, stream=sys.stdout):
        self.stream = stream
        self.width = max(len(n) for n in [*names, SELF])
        self.colour = stream.isatty() and not os.environ.get("NO_COLOR")
        self.lock = threading.Lock()

    def line(self, name: str, text: str, colour: str = "0") -> None:
        prefix = f"{time.strftime('%H:%M:%S')} {name:<{self.width}} | "
        if self.colour:
            prefix = f"\033[{colour}m{prefix}\033[0m"
        with self.lock:
            self.stream.write(prefix + text + "\n")
            self.stream.flush()

    def say(self, text: str) -> None:
        self.line(SELF, text, "1")


def read_procfile(path: str) -> list[tuple[str, str]]:
    entries = []
    with open(path) as procfile:
        for raw in procfile:
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            name, _, command = line.partition(":")
            if not command.strip():
                raise SystemExit(f"{path}: no command for {name!r}")
            entries.append((name.strip(), command.strip()))
    if not entries:
        raise SystemExit(f"{path} names no process")
    return entries


def signal_group(pgid: int, signum: int) -> bool:
    """Send a signal to a process group; False when none of it is left."""
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        return False
    return True


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"was killed by {name}"
    return "exited normally (code 0)" if returncode == 0 else f"exited with code {returncode}"


def duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


class Supervisor:
    def __init__(self, entries, *, backoff_max, stable_after, stop_timeout, events=None):
        self.services = [
            Service(name, command, COLOURS[i % len(COLOURS)])
            for i, (name, command) in enumerate(entries)
        ]
        self.console = Console([s.name for s in self.services])
        self.backoff_max = backoff_max
        self.stable_after = stable_after
        self.stop_timeout = stop_timeout
        self.events = events
        self.stopping = False

    def event(self, **data) -> None:
        if self.events:
            with open(self.events, "a") as out:
                out.write(json.dumps({"at": time.time(), **data}) + "\n")

    def start(self, service: Service) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        service.proc = subprocess.Popen(
            ["/bin/sh", "-c", f"exec {service.command}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # its own process group: stopped as a whole, and Ctrl-C
        )  # in the terminal reaches the supervisor only, which stops everyone in order
        service.started_at = time.monotonic()
        service.last_lines.clear()
        self.console.say(f"{service.name} started (pid {service.proc.pid}): {service.command}")
        self.event(event="start", name=service.name, pid=service.proc.pid)
        threading.Thread(target=self._pump, args=(service, service.proc), daemon=True).start()

    def _pump(self, service: Service, proc: subprocess.Popen) -> None:
        for raw in proc.stdout:
            text = raw.decode("utf-8", "replace").rstrip("\n")
            service.last_lines.append(text)
            self.console.line(service.name, text, service.colour)

    def _ended(self, service: Service) -> None:
        proc = service.proc
        ran = time.monotonic() - service.started_at
        self._stop_group(proc.pid, timeout=5)  # what it left behind, e.g. pool processes
        time.sleep(0.1)  # let its last lines through
        if ran >= self.stable_after:
            service.quick_failures = 0
        service.quick_failures += 1
        delay = min(self.backoff_max, 2.0 ** (service.quick_failures - 1))
        service.start_at = time.monotonic() + delay
        service.restarts += 1
        self.console.say(
            f"{service.name} (pid {proc.pid}) {describe_exit(proc.returncode)} after "
            f"{duration(ran)}; starting it again in {delay:g} s (restart {service.restarts})"
        )
        if service.last_lines:
            self.console.say(f"{service.name}'s last lines:")
            for text in list(service.last_lines)[-10:]:
                self.console.say(f"    {text}")
        self.event(
            event="exit", name=service.name, pid=proc.pid, returncode=proc.returncode,
            ran=round(ran, 1), restart_in=delay, restarts=service.restarts,
        )  # fmt: skip
        service.proc = None

    def _stop_group(self, pgid: int, *, timeout: float) -> None:
        if not signal_group(pgid, signal.SIGTERM):
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not signal_group(pgid, 0):
                return
            time.sleep(0.1)
        signal_group(pgid, signal.SIGKILL)

    def run(self) -> int:
        signal.signal(signal.SIGINT, self._on_stop)
        signal.signal(signal.SIGTERM, self._on_stop)
        for service in self.services:
            self.start(service)
        while not self.stopping:
            for service in self.services:
                if self.stopping:
                    break
                if service.proc is not None and service.proc.poll() is not None:
                    self._ended(service)
                elif service.proc is None and time.monotonic() >= service.start_at:
                    self.start(service)
            time.sleep(0.2)
        return self.shutdown()

    def _on_stop(self, signum, frame) -> None:
        if self.stopping:  # a second Ctrl-C: no more waiting
            for service in self.services:
                if service.proc is not None:
                    signal_group(service.proc.pid, signal.SIGKILL)
            return
        self.stopping = True

    def shutdown(self) -> int:
        running = [s for s in self.services if s.proc is not None and s.proc.poll() is None]
        self.console.say(f"stopping {', '.join(s.name for s in running) or 'nothing'}")
        for service in running:
            signal_group(service.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout
        for service in running:
            try:
                service.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.console.say(f"{service.name} did not stop in {self.stop_timeout} s: killed")
        for service in self.services:  # the groups, leaders gone or not
            if service.proc is not None:
                signal_group(service.proc.pid, signal.SIGKILL)
                self.event(event="stop", name=service.name, pid=service.proc.pid)
        self.console.say("stopped")
        return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-f", "--procfile", default="Procfile")
    parser.add_argument("--backoff-max", type=float, default=60.0)
    parser.add_argument("--stable-after", type=float, default=60.0)
    parser.add_argument("--stop-timeout", type=float, default=10.0)
    parser.add_argument("--events", default=os.environ.get("SUPERVISE_EVENTS") or None)
    parser.add_argument("names", nargs="*", metavar="NAME", help="only these processes")
    args = parser.parse_args(argv)
    entries = read_procfile(args.procfile)
    unknown = sorted(set(args.names) - {name for name, _ in entries})
    if unknown:
        parser.error(f"{args.procfile} has no process {', '.join(unknown)}")
    if args.names:
        entries = [(name, command) for name, command in entries if name in args.names]
    for _name, command in entries:
        shlex.split(command)  # a command the shell could not parse stops us before anything runs
    supervisor = Supervisor(
        entries, backoff_max=args.backoff_max, stable_after=args.stable_after,
        stop_timeout=args.stop_timeout, events=args.events,
    )  # fmt: skip
    return supervisor.run()


if __name__ == "__main__":
    sys.exit(main())
