"""Job tasks: transient errors retry with backoff, then defer to the periodic re-apply."""

from fleet import kube
from queues import job_tasks


def test_apply_task_retries_transient_errors_then_defers(monkeypatch):
    calls = []

    def flaky(*, job_id):
        calls.append(job_id)
        raise kube.TransientError("connection refused", reason="Connection")

    monkeypatch.setattr(job_tasks.job_sync, "job_apply", flaky)
    result = job_tasks.apply_job.apply(args=[7])
    assert result.get() == "deferred"
    assert calls == [7] * (job_tasks.apply_job.max_retries + 1)


def test_apply_task_returns_what_the_service_did(monkeypatch):
    monkeypatch.setattr(job_tasks.job_sync, "job_apply", lambda *, job_id: "applied")
    assert job_tasks.apply_job.apply(args=[7]).get() == "applied"


def test_backoff_grows_and_is_capped():
    waits = [job_tasks._backoff(n) for n in range(10)]
    assert waits == sorted(waits) and waits[0] == 0.5 and waits[-1] == 60.0
