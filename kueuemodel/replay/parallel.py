"""Replays side by side: independent replays (say, today's configuration and a proposal) each in
a forked process of its own, as many at once as there are cores to give them.

A replay is pure computation on data in memory, so a forked child needs nothing but its input,
which it has from the fork; it sends back only what a replay finds (each job's results, the
pools' busy time, the counts), and the parent sets them on its own jobs, as replay() would have.
Plain os.fork, not multiprocessing: a Celery prefork worker's processes are daemonic, and
multiprocessing refuses to start children from them.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pickle
import signal

from kueuemodel.replay import ReplayResult, replay

RESULTS = ("admitted", "started", "ended", "preempted", "gpu_seconds")
PR_SET_PDEATHSIG = 1  # prctl(2)


def usable_cpus() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _found(result: ReplayResult) -> tuple:
    jobs = [tuple(getattr(job, name) for name in RESULTS) for job in result.jobs]
    return result.busy_gpu_seconds, result.admissions, result.preemptions, jobs


def _result(run: dict, found: tuple) -> ReplayResult:
    busy, admissions, preemptions, rows = found
    jobs = run["jobs"]
    for job, row in zip(jobs, rows, strict=True):
        for name, value in zip(RESULTS, row, strict=True):
            setattr(job, name, value)
    return ReplayResult(jobs=jobs, horizon=run["horizon"], busy_gpu_seconds=busy,
                        admissions=admissions, preemptions=preemptions)  # fmt: skip


class ReplayProcessError(RuntimeError):
    """A replay run in a child process failed or the process died."""


def _die_with(parent: int) -> None:
    """Where Linux lets it, the child is killed when its parent dies (a worker killed in the
    middle of a what-if leaves no replay running on)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (AttributeError, OSError):
        return
    if os.getppid() != parent:  # it died before the request was in place
        os._exit(1)


def _child(runs: list[dict], indexes: list[int], out: int, parent: int) -> None:
    """In the forked child: run its replays, write what they found, and leave at once (no
    exit handlers: the parent's database connections and files are the parent's)."""
    code = 1
    try:
        _die_with(parent)
        try:
            payload = ("ok", [(i, _found(replay(**runs[i]))) for i in indexes])
            code = 0
        except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises
            payload = ("error", f"{type(exc).__name__}: {exc}")
        with os.fdopen(out, "wb") as pipe:
            pickle.dump(payload, pipe, protocol=pickle.HIGHEST_PROTOCOL)
    finally:
        os._exit(code)


def _collect(pid: int, fd: int) -> list:
    with os.fdopen(fd, "rb") as pipe:
        data = pipe.read()
    _, status = os.waitpid(pid, 0)
    if not data:
        how = (f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status)
               else f"exit status {os.waitstatus_to_exitcode(status)}")  # fmt: skip
        raise ReplayProcessError(f"a replay process ended ({how}) without its result")
    state, found = pickle.loads(data)
    if state != "ok":
        raise ReplayProcessError(f"a replay failed in its process: {found}")
    return found


def replay_all(runs: list[dict], processes: int = 1) -> list[ReplayResult]:
    """replay(**run) for each run, results in the runs' order. With processes > 1, up to that
    many run at once: the parent takes its share, a forked child each of the others. A child
    that fails or dies raises ReplayProcessError here, after every child has been reaped."""
    processes = min(processes, len(runs))
    if processes <= 1 or not hasattr(os, "fork"):
        return [replay(**run) for run in runs]
    shares = [list(range(len(runs)))[k::processes] for k in range(processes)]
    children: list[tuple[int, int]] = []
    parent = os.getpid()
    results: dict[int, ReplayResult] = {}
    try:
        for share in shares[1:]:
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child leaves through os._exit
                os.close(read)
                _child(runs, share, write, parent)
            os.close(write)
            children.append((pid, read))
        for i in shares[0]:
            results[i] = replay(**runs[i])
        while children:
            pid, read = children.pop(0)
            for i, found in _collect(pid, read):
                results[i] = _result(runs[i], found)
    finally:
        for pid, read in children:  # the parent failed: the others' work is not wanted
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            os.close(read)
            os.waitpid(pid, 0)
    return [results[i] for i in range(len(runs))]
