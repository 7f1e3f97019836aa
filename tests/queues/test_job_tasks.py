"""Job tasks: transient errors retry with backoff, then defer to the periodic re-apply."""

from fleet import kube
from queues import job_tasks


def test_apply_task_retries_transient_errors_then_defers(monkeypatch):
    calls = []

    def flaky(*, cluster_id):
        calls.append(cluster_id)
        raise kube.TransientError("connection refused", reason="Connection")

    monkeypatch.setattr(job_tasks.job_sync, "jobs_apply_ready", flaky)
    result = job_tasks.apply_jobs.apply(args=[7])
    assert result.get() == {"deferred": 1}
    assert calls == [7] * (job_tasks.apply_jobs.max_retries + 1)


def test_apply_task_returns_what_the_service_did(monkeypatch):
    monkeypatch.setattr(
        job_tasks.job_sync, "jobs_apply_ready", lambda *, cluster_id: {"applied": 3}
    )
    assert job_tasks.apply_jobs.apply(args=[7]).get() == {"applied": 3}


def test_backoff_grows_and_is_capped():
    waits = [job_tasks._backoff(n) for n in range(10)]
    assert waits == sorted(waits) and waits[0] == 0.5 and waits[-1] == 60.0
