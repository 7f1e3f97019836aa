"""The portal's own processes started by tests as their pods start them (scripts/serve)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SERVE = str(Path(__file__).resolve().parents[1] / "scripts" / "serve")


@contextmanager
def serving(command: str, env: dict, log: Path, *, stop_within: float = 30) -> Iterator:
    """`scripts/serve <command>` with env, its output in log; stopped (SIGTERM, then SIGKILL
    after stop_within seconds) when the block ends."""
    out = open(log, "w")  # noqa: SIM115 - open while the process writes
    proc = subprocess.Popen([SERVE, command], cwd=Path(SERVE).parents[1], env=env, stdout=out,
                            stderr=subprocess.STDOUT)  # fmt: skip
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=stop_within)
        except subprocess.TimeoutExpired:
            proc.kill()
        out.close()


def alive(pid: int) -> bool:
    """Whether process `pid` runs: a zombie (dead, not yet reaped by its parent) counts as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


def child_pids(pid: int) -> list[int]:
    """The processes whose parent is `pid`, read from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(") ", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found
