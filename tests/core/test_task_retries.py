"""The one retry policy every task uses (core.worker.task): transient errors are retried with
growing, jittered, capped waits a bounded number of times, then given up; others never."""

import pytest
from celery.exceptions import Retry

from core.worker import retry_countdown, task


class Flaky(Exception):
    """Stands for a cluster or server that did not answer."""


calls = []


@task(name="tests.flaky", transient=(Flaky,), max_retries=3)
def flaky(kind: str) -> str:
    calls.append(kind)
    if kind == "transient":
        raise Flaky("connection refused")
    if kind == "permanent":
        raise ValueError("422 Invalid")
    return "done"


@pytest.fixture(autouse=True)
def _fresh_calls():
    calls.clear()


def test_transient_errors_are_retried_up_to_the_bound_then_given_up():
    result = flaky.apply(args=["transient"])
    assert result.get() is None
    assert calls == ["transient"] * 4  # the first try and three retries


def test_permanent_errors_are_never_retried():
    with pytest.raises(ValueError):
        flaky.apply(args=["permanent"], throw=True)
    assert calls == ["permanent"]


def test_a_retry_is_scheduled_with_the_policys_countdown(monkeypatch):
    scheduled = []

    def record(*, exc, countdown, **kwargs):
        scheduled.append(countdown)
        return Retry(exc=exc, when=countdown)

    monkeypatch.setattr(flaky._get_current_object(), "retry", record)
    for retries in range(3):
        with pytest.raises(Retry):
            flaky.apply(args=["transient"], retries=retries, throw=True)
    assert [2**n / 2 <= c <= 2**n for n, c in enumerate(scheduled)] == [True] * 3


def test_countdowns_double_are_capped_and_jittered_within_half():
    for retries in range(12):
        ceiling = min(60.0, 2.0**retries)
        waits = {retry_countdown(retries) for _ in range(50)}
        assert all(ceiling / 2 <= w <= ceiling for w in waits)
        assert len(waits) > 1  # jittered
    assert retry_countdown(20, base=10, cap=900) <= 900
