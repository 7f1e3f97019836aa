"""kubesim.replay.parallel: independent replays side by side in forked processes give what
replay() gives one after the other, on the caller's own jobs; a child that fails or dies is an
error the caller sees."""

from __future__ import annotations

import os
import random
import signal
import time

import pytest

from kueuemodel.replay import ReplayJob, parallel, replay
from kueuemodel.replay.parallel import ReplayProcessError, replay_all

GPU = "nvidia.com/gpu"


def _run(seed: int, quota: int) -> dict:
    rng = random.Random(seed)
    cqs = [
        {"metadata": {"name": f"cq-{team}"}, "spec": {
            "namespaceSelector": {}, "cohortName": "org",
            "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
            "resourceGroups": [{"coveredResources": [GPU], "flavors": [
                {"name": "a100", "resources": [{"name": GPU, "nominalQuota": quota}]}]}],
        }}
        for team in ("a", "b")
    ]  # fmt: skip
    lqs = [{"metadata": {"name": "main", "namespace": f"team-{team}"},
            "spec": {"clusterQueue": f"cq-{team}"}} for team in ("a", "b")]  # fmt: skip
    jobs = [
        ReplayJob(
            key=f"j{i}",
            namespace=f"team-{rng.choice('ab')}",
            queue="main",
            pool="a100",
            resource=GPU,
            workers=rng.choice((1, 2)),
            gpus_per_worker=rng.choice((1, 2, 4)),
            priority=rng.choice((0, 100)),
            submit=rng.uniform(0, 3600),
            runtime=rng.uniform(60, 1800),
        )  # fmt: skip
        for i in range(80)
    ]
    return {"cluster_queues": cqs, "local_queues": lqs, "pools": {"a100": [8, 8]},
            "jobs": jobs, "horizon": 7200.0}  # fmt: skip


def _outcome(result) -> tuple:
    jobs = [(j.key, j.admitted, j.started, j.ended, j.preempted, j.gpu_seconds)
            for j in result.jobs]  # fmt: skip
    return result.busy_gpu_seconds, result.admissions, result.preemptions, jobs


def test_side_by_side_gives_what_one_after_the_other_gives_on_the_callers_jobs():
    expected = [_outcome(replay(**_run(seed, quota))) for seed, quota in
                ((1, 6), (2, 8), (3, 4), (4, 10), (5, 5))]  # fmt: skip
    runs = [_run(seed, quota) for seed, quota in ((1, 6), (2, 8), (3, 4), (4, 10), (5, 5))]
    results = replay_all(runs, processes=3)
    assert [_outcome(r) for r in results] == expected
    assert any(e[2] for e in expected), "the runs should preempt, to be worth comparing"
    for run, result in zip(runs, results, strict=True):
        assert result.jobs is run["jobs"]  # the results are set on the jobs handed in
        assert any(job.started is not None for job in run["jobs"])


def test_one_process_runs_them_in_this_one(monkeypatch):
    parent = os.getpid()
    seen = []
    monkeypatch.setattr(parallel, "replay", lambda **run: seen.append(os.getpid()) or replay(**run))
    replay_all([_run(1, 6), _run(2, 6)], processes=1)
    assert seen == [parent, parent]


def _failing_in_children(exc_or_signal, parent: int):
    def run(**kwargs):
        if os.getpid() != parent:
            if isinstance(exc_or_signal, int):
                os.kill(os.getpid(), exc_or_signal)
            raise exc_or_signal
        return replay(**kwargs)

    return run


def test_a_replay_that_fails_in_its_process_is_an_error_with_its_cause(monkeypatch):
    failing = _failing_in_children(ValueError("no such flavor: h200"), os.getpid())
    monkeypatch.setattr(parallel, "replay", failing)
    with pytest.raises(ReplayProcessError, match="ValueError: no such flavor: h200"):
        replay_all([_run(1, 6), _run(2, 6)], processes=2)


def test_a_replay_process_that_is_killed_is_an_error_not_a_missing_result(monkeypatch):
    monkeypatch.setattr(parallel, "replay", _failing_in_children(signal.SIGKILL, os.getpid()))
    with pytest.raises(ReplayProcessError, match="signal 9"):
        replay_all([_run(1, 6), _run(2, 6)], processes=2)


def test_when_the_parents_own_replay_fails_its_children_are_stopped_and_reaped(monkeypatch):
    parent = os.getpid()
    forked = []
    real_fork = os.fork

    def fork():
        pid = real_fork()
        if pid:
            forked.append(pid)
        return pid

    def run(**kwargs):
        if os.getpid() == parent:
            raise RuntimeError("the parent's replay broke")
        signal.pause()  # a long replay: only SIGKILL ends it

    monkeypatch.setattr(parallel.os, "fork", fork)
    monkeypatch.setattr(parallel, "replay", run)
    with pytest.raises(RuntimeError, match="the parent's replay broke"):
        replay_all([_run(1, 6), _run(2, 6), _run(3, 6)], processes=3)
    assert len(forked) == 2
    for pid in forked:  # reaped already: not a child of ours any more
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def _gone(pid: int) -> bool:
    """Whether the process has ended (a zombie waiting for init to reap it counts)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def test_a_replay_process_dies_with_a_worker_killed_in_the_middle(tmp_path, monkeypatch):
    forked = tmp_path / "child"
    real_fork = os.fork

    def fork():
        pid = real_fork()
        if pid:
            forked.write_text(str(pid))
        return pid

    def run(**kwargs):
        signal.pause()  # a long replay, in the worker and in its child

    worker = real_fork()
    if worker == 0:  # pragma: no cover - the "worker", killed below
        try:
            monkeypatch.setattr(parallel.os, "fork", fork)
            monkeypatch.setattr(parallel, "replay", run)
            replay_all([_run(1, 6), _run(2, 6)], processes=2)
        finally:
            os._exit(0)
    child = None
    try:
        deadline = time.monotonic() + 20
        while not (forked.exists() and forked.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        child = int(forked.read_text())
        time.sleep(0.2)  # the child is in its replay
        assert not _gone(child)
        os.kill(worker, signal.SIGKILL)
        os.waitpid(worker, 0)
        deadline = time.monotonic() + 10
        while not _gone(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _gone(child), "the replay went on after its worker was killed"
    finally:
        if child is not None and not _gone(child):
            os.kill(child, signal.SIGKILL)
