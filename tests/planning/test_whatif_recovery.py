"""What-if runs a worker lost: a run whose worker process was killed in the middle of its replay
is queued again and replayed (at once by the next worker process on the host, else by the beat
once the claim is older than a replay takes); a queued run whose task was never taken is sent
again."""

from __future__ import annotations

import socket
from datetime import timedelta

from django.utils import timezone

from config.celery import app as celery_app
from planning.models import WhatIfRun
from planning.services.whatif import (
    CLAIM_TTL,
    REDISPATCH_AFTER,
    whatif_create,
    whatif_release_dead,
    whatif_resume,
)
from queues.services.jobs.apply import claim_holder
from tests.planning.test_whatif import history  # noqa: F401  (the fixture)
from tests.queues.builders import dead_pid, run_tasks_eagerly

State = WhatIfRun.State


def _run(w, **fields) -> WhatIfRun:
    return WhatIfRun.objects.create(name="lost", created_by=w["maria"], days=1, **fields)


def _states(*runs) -> list[str]:
    return [WhatIfRun.objects.get(pk=r.pk).state for r in runs]


def test_a_run_whose_worker_process_died_on_this_host_is_queued_again_and_replayed(
    history,  # noqa: F811
    monkeypatch,
):
    w = history
    run_tasks_eagerly(monkeypatch)
    now = timezone.now()
    host = socket.gethostname()
    lost = _run(w, state=State.RUNNING, claimed_by=f"{host}:{dead_pid()}", claimed_at=now)
    alive = _run(w, state=State.RUNNING, claimed_by=claim_holder(), claimed_at=now)
    elsewhere = _run(w, state=State.RUNNING, claimed_by=f"{host}-2:{dead_pid()}", claimed_at=now)
    assert whatif_release_dead() == [lost.pk]
    lost.refresh_from_db()
    assert lost.state == State.DONE and lost.result["jobs"] == 6 and lost.dispatched_at
    # A live process's replay, and another host's (whose processes this one cannot see), stay.
    assert _states(alive, elsewhere) == [State.RUNNING, State.RUNNING]


def test_the_beat_takes_over_stale_claims_and_sends_again_what_was_not_taken(
    history,  # noqa: F811
    monkeypatch,
):
    w = history
    run_tasks_eagerly(monkeypatch)
    now = timezone.now()
    minute = timedelta(minutes=1)
    stale = _run(w, state=State.RUNNING, claimed_by="gone:1", claimed_at=now - CLAIM_TTL - minute)
    recent = _run(w, state=State.RUNNING, claimed_by="busy:1", claimed_at=now - minute)
    not_taken = _run(w, state=State.QUEUED, dispatched_at=now - REDISPATCH_AFTER - minute)
    never_sent = _run(w, state=State.QUEUED)
    just_sent = _run(w, state=State.QUEUED, dispatched_at=now - minute)
    finished = _run(w, state=State.DONE, claimed_by="gone:1", claimed_at=now - 2 * CLAIM_TTL)
    sent = whatif_resume(now=now)
    assert sorted(sent) == sorted([stale.pk, not_taken.pk, never_sent.pk])
    assert _states(stale, not_taken, never_sent) == [State.DONE] * 3
    assert _states(recent, just_sent, finished) == [State.RUNNING, State.QUEUED, State.DONE]
    assert celery_app.conf.beat_schedule["queues-resume-whatifs"]["task"] == "queues.resume_whatifs"


def test_a_new_run_records_when_its_task_was_sent_and_who_replays_it(
    history,  # noqa: F811
    monkeypatch,
    django_capture_on_commit_callbacks,
):
    w = history
    run_tasks_eagerly(monkeypatch)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        run = whatif_create(actor=w["maria"], name="now", days=1)
    assert WhatIfRun.objects.get(pk=run.pk).dispatched_at is None  # not before it commits
    for callback in callbacks:
        callback()
    run.refresh_from_db()
    assert run.state == State.DONE and run.dispatched_at is not None
    assert run.claimed_by == claim_holder() and run.claimed_at is not None
