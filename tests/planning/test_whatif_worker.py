"""A what-if run survives its worker process being killed in the middle of the replay: the
worker's next process queues it again and replays it (a real prefork worker, killed with
SIGKILL; the replay's own forked processes die with it)."""

from __future__ import annotations

import os
import signal
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.utils import timezone

from bench.whatif import record_plainly, seed
from planning.models import WhatIfRun
from planning.services.whatif import whatif_create
from tests.conftest import wait_until

State = WhatIfRun.State


def test_a_run_whose_worker_process_is_killed_mid_replay_is_replayed_by_the_next(
    celery_prefork_worker,
):
    # A week of the demo fleet's jobs: a replay of some seconds, time to kill it in.
    _, jobs, _ = seed(jobs=4000, days=7, seed=3, end=timezone.now() - timedelta(minutes=1))
    record_plainly(jobs)
    admin = get_user_model().objects.get(username="admin")
    # A day more than the jobs span: the window, taken when the replay runs (after the kill),
    # holds them all however long the workers take.
    run = whatif_create(actor=admin, name="through a kill", days=8)

    def claimed():
        return WhatIfRun.objects.filter(pk=run.pk, state=State.RUNNING).exclude(claimed_by="")

    assert wait_until(lambda: claimed().exists(), timeout=60), WhatIfRun.objects.get(pk=run.pk)
    holder = claimed().values_list("claimed_by", flat=True).first()
    killed = int(holder.rsplit(":", 1)[1])
    os.kill(killed, signal.SIGKILL)

    def done():
        return WhatIfRun.objects.get(pk=run.pk).state in (State.DONE, State.FAILED)

    assert wait_until(done, timeout=180), WhatIfRun.objects.get(pk=run.pk).__dict__
    run.refresh_from_db()
    assert run.state == State.DONE, run.error
    assert run.result["jobs"] == 4000
    assert int(run.claimed_by.rsplit(":", 1)[1]) != killed  # replayed by the next process
