"""A what-if run's life: claimed and replayed by a worker, queued again when its worker was lost."""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta

from django.db.models import Q
from django.utils import timezone

from planning.models import WhatIfRun
from planning.services.whatif.scenario import whatif_compute
from queues.services.jobs.apply import claim_holder, holder_dead, this_host_prefix

log = logging.getLogger(__name__)

# -- a worker lost in the middle -------------------------------------------------------------------

# A replay claimed longer ago is taken over (a month of 20,000 jobs takes well under a minute).
CLAIM_TTL = timedelta(minutes=30)
# A queued run whose task was sent longer ago and not taken is sent again.
REDISPATCH_AFTER = timedelta(minutes=5)


def runs_dispatch(run_ids: list[int]) -> None:
    """Send the runs' replay tasks (a broker that is down keeps them, see core.worker); a
    duplicate is harmless: a run is claimed once."""
    from planning.tasks import run_whatif

    WhatIfRun.objects.filter(pk__in=run_ids).update(dispatched_at=timezone.now())
    for pk in run_ids:
        run_whatif.delay(pk)


def whatif_release_dead() -> list[int]:
    """Runs that a worker process on this host claimed and that no longer exists (killed in
    the middle of a replay) go back to the queue and are sent again; returns their ids.
    Worker processes call this when they start (planning.apps)."""
    running = WhatIfRun.objects.filter(
        state=WhatIfRun.State.RUNNING, claimed_by__startswith=this_host_prefix()
    ).values_list("pk", "claimed_by")
    dead = [pk for pk, holder in running if holder_dead(holder)]
    return _requeue(dead, why="its worker process is gone")


def whatif_resume(*, now: datetime | None = None) -> list[int]:
    """Beat: runs a worker lost go back to the queue (claimed by a dead process on this host,
    or longer ago than CLAIM_TTL), and queued runs whose task was not taken within
    REDISPATCH_AFTER (or never sent) are sent again; returns the ids sent."""
    now = now or timezone.now()
    requeued = whatif_release_dead()
    stale = list(WhatIfRun.objects.filter(state=WhatIfRun.State.RUNNING,
                                          claimed_at__lt=now - CLAIM_TTL)
                 .values_list("pk", flat=True))  # fmt: skip
    requeued += _requeue(stale, why="its claim outlived the time a replay takes")
    waiting = list(
        WhatIfRun.objects.filter(state=WhatIfRun.State.QUEUED)
        .filter(Q(dispatched_at__isnull=True) | Q(dispatched_at__lt=now - REDISPATCH_AFTER))
        .exclude(pk__in=requeued)
        .values_list("pk", flat=True)
    )
    runs_dispatch(waiting)
    return requeued + waiting


def _requeue(run_ids: list[int], *, why: str) -> list[int]:
    """Put RUNNING runs back in the queue and send them again (each only if still running as
    found: a worker that finished it in between wins)."""
    back = []
    for pk in run_ids:
        if WhatIfRun.objects.filter(pk=pk, state=WhatIfRun.State.RUNNING).update(
            state=WhatIfRun.State.QUEUED, claimed_by="", claimed_at=None
        ):
            log.warning("what-if run %s queued again: %s", pk, why)
            back.append(pk)
    if back:
        runs_dispatch(back)
    return back


def whatif_execute(*, run_id: int, now: datetime | None = None) -> WhatIfRun:
    """Replay the run's window under today's configuration and the proposal; store the figures."""
    claimed = WhatIfRun.objects.filter(pk=run_id, state=WhatIfRun.State.QUEUED).update(
        state=WhatIfRun.State.RUNNING, claimed_by=claim_holder(), claimed_at=timezone.now()
    )
    run = WhatIfRun.objects.get(pk=run_id)
    if not claimed:
        return run
    began = time.monotonic()
    try:
        result = whatif_compute(days=run.days, proposal=run.proposal, now=now)
    except Exception as exc:  # the run records the failure; the replay has no side effects
        WhatIfRun.objects.filter(pk=run_id).update(
            state=WhatIfRun.State.FAILED, error=f"{type(exc).__name__}: {exc}",
            finished_at=timezone.now(),
        )  # fmt: skip
        raise
    WhatIfRun.objects.filter(pk=run_id).update(
        state=WhatIfRun.State.DONE, result=result, seconds=round(time.monotonic() - began, 2),
        finished_at=timezone.now(),
    )  # fmt: skip
    run.refresh_from_db()
    return run
