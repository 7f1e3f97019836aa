"""What every Celery task runs with: the task decorator and its one retry policy, and the outbox
that keeps a message the broker did not take (core.models.UnsentTask) until it answers.

The Celery app itself is config.celery's; it makes every task a PortalTask (by name, so that
config imports no app)."""

import functools
import logging
import random
from datetime import UTC, datetime, timedelta

from celery import Task, current_app, shared_task
from celery.signals import worker_process_init
from kombu.exceptions import OperationalError

from core.outage import DATABASE_DOWN, forget_broken_connections

logger = logging.getLogger(__name__)


class PortalTask(Task):
    """Every portal task: a message that cannot be sent because the broker is down is kept in
    the database (core.UnsentTask) and sent by the beat once the broker answers, instead of
    failing the request that already committed its work (and losing the message)."""

    def apply_async(self, args=None, kwargs=None, **options):
        try:
            return super().apply_async(args, kwargs, **options)
        except OperationalError as exc:
            keep_unsent(self.name, args, kwargs, exc)
            return None


def keep_unsent(name: str, args, kwargs, exc: Exception) -> None:
    from core.models import UnsentTask

    logger.warning("broker unavailable; %s kept to send later: %s", name, exc)
    UnsentTask.objects.create(
        name=name, args=list(args or ()), kwargs=dict(kwargs or {}), error=str(exc)[:2000]
    )


def send_unsent(limit: int = 500) -> int:
    """Send the messages kept while the broker was down (oldest first); returns how many."""
    from core.models import UnsentTask

    sent = 0
    for row in UnsentTask.objects.order_by("pk")[:limit]:
        try:
            current_app.send_task(row.name, args=row.args, kwargs=row.kwargs)
        except OperationalError:
            break  # still down: the next run tries again
        row.delete()
        sent += 1
    return sent


def retry_countdown(retries: int, *, base: float = 1.0, cap: float = 60.0) -> float:
    """Seconds before retry number `retries` + 1: doubling from `base`, capped at `cap`, and
    jittered down to half so that workers retrying together spread out."""
    ceiling = min(cap, base * 2**retries)
    return ceiling / 2 + random.uniform(0, ceiling / 2)


# A database that does not answer (restarting, failing over) is transient for every task: it
# is retried on a budget of its own, long enough for a restart or a failover (about four
# minutes), and at most 5 s apart, so that work cut off by an outage goes on within seconds of
# the database's return.
DATABASE_RETRIES = 60
DATABASE_BACKOFF = {"base": 1.0, "cap": 5.0}


def task(*, name: str, transient=(), max_retries: int = 5, backoff_base=1.0, backoff_cap=60.0,
         on_retry=None, **options):  # fmt: skip
    """The portal's task decorator and its one retry policy.

    Explicit name, no result. An error of a `transient` type (a cluster, exporter or mail
    server that did not answer) is retried with exponential backoff and jitter, at most
    `max_retries` times; then the task logs and gives up, returning None: the periodic
    reconcilers and syncs pick the work up again, so nothing waits on a retry forever. Any
    other error is permanent and never retried (the services store it on their rows).

    The database not answering (core.outage.DATABASE_DOWN) is transient for every task: its
    broken connections are closed and the task runs again, up to DATABASE_RETRIES times. The
    services give back what they held (claims, leases) on the way out where they can, and the
    retry, which keeps the task's id (core.worker.current_run_id), takes back what they could
    not.

    `on_retry(exc, attempt, next_at, *args, **kwargs)`, when given, is told of each failed try
    (next_at None when the task gives up), so that the people waiting can be told too.
    """

    def decorate(fn):
        @shared_task(name=name, bind=True, ignore_result=True, max_retries=max_retries, **options)
        @functools.wraps(fn)
        def run(self, *args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except DATABASE_DOWN as exc:
                forget_broken_connections()
                if self.request.retries >= DATABASE_RETRIES:
                    logger.warning("%s gave up: the database did not answer: %s", name, exc)
                    return None
                countdown = retry_countdown(self.request.retries, **DATABASE_BACKOFF)
                logger.warning(
                    "%s cut off by the database (%s); running again in %.1f s",
                    name, str(exc).strip()[:200], countdown,
                )  # fmt: skip
                raise self.retry(
                    exc=exc, countdown=countdown, max_retries=DATABASE_RETRIES
                ) from exc
            except transient as exc:
                attempt = self.request.retries + 1
                if self.request.retries >= self.max_retries:
                    logger.warning("%s gave up after %d tries: %s", name, self.max_retries + 1, exc)
                    if on_retry:
                        on_retry(exc, attempt, None, *args, **kwargs)
                    return None
                countdown = retry_countdown(
                    self.request.retries, base=backoff_base, cap=backoff_cap
                )
                if on_retry:
                    next_at = datetime.now(UTC) + timedelta(seconds=countdown)
                    on_retry(exc, attempt, next_at, *args, **kwargs)
                raise self.retry(exc=exc, countdown=countdown) from exc

        return run

    return decorate


def current_run_id() -> str:
    """The id of the task run in progress (kept across its retries), "" outside a task: what a
    service records on what it holds, so that the task's retry can take it back."""
    from celery import current_task

    request = getattr(current_task, "request", None)
    return str(getattr(request, "id", "") or "")


def at_worker_process_start(work, *, failing: str, dispatch_uid: str) -> None:
    """Run `work()` in each new Celery worker process before it takes a task (an app connects
    its start-up work from its AppConfig.ready). A database that is not up yet is logged as
    "could not <failing>" and left to the next process or the beat; the connection the work
    made is closed, so the forked child does not keep one made while it was starting."""

    def run(**_signal) -> None:
        from django.db import DatabaseError, connection

        try:
            work()
        except DatabaseError as exc:
            logger.warning("could not %s: %s", failing, exc)
        finally:
            connection.close()

    worker_process_init.connect(run, weak=False, dispatch_uid=dispatch_uid)
