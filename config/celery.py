"""The one Celery app, configured from Django settings; the beat schedule lives here."""

import functools
import logging
import os
import random
from datetime import UTC, datetime, timedelta

from celery import Celery, Task, signals
from kombu.exceptions import OperationalError

from config import broker  # noqa: F401 (registers the embedded default's sqlite:// transport)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")


class PortalTask(Task):
    """Every portal task: a message that cannot be sent because the broker is down is kept in
    the database (fleet.UnsentTask) and sent by the beat once the broker answers, instead of
    failing the request that already committed its work (and losing the message)."""

    def apply_async(self, args=None, kwargs=None, **options):
        try:
            return super().apply_async(args, kwargs, **options)
        except OperationalError as exc:
            keep_unsent(self.name, args, kwargs, exc)
            return None


def keep_unsent(name: str, args, kwargs, exc: Exception) -> None:
    from fleet.models import UnsentTask

    logger.warning("broker unavailable; %s kept to send later: %s", name, exc)
    UnsentTask.objects.create(
        name=name, args=list(args or ()), kwargs=dict(kwargs or {}), error=str(exc)[:2000]
    )


def send_unsent(limit: int = 500) -> int:
    """Send the messages kept while the broker was down (oldest first); returns how many."""
    from fleet.models import UnsentTask

    sent = 0
    for row in UnsentTask.objects.order_by("pk")[:limit]:
        try:
            app.send_task(row.name, args=row.args, kwargs=row.kwargs)
        except OperationalError:
            break  # still down: the next run tries again
        row.delete()
        sent += 1
    return sent


app = Celery("quartermaster", task_cls=PortalTask)
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
logger = logging.getLogger(__name__)


def retry_countdown(retries: int, *, base: float = 1.0, cap: float = 60.0) -> float:
    """Seconds before retry number `retries` + 1: doubling from `base`, capped at `cap`, and
    jittered down to half so that workers retrying together spread out."""
    ceiling = min(cap, base * 2**retries)
    return ceiling / 2 + random.uniform(0, ceiling / 2)


def task(*, name: str, transient=(), max_retries: int = 5, backoff_base=1.0, backoff_cap=60.0,
         on_retry=None, **options):  # fmt: skip
    """The portal's task decorator and its one retry policy.

    Explicit name, no result. An error of a `transient` type (a cluster, exporter or mail
    server that did not answer) is retried with exponential backoff and jitter, at most
    `max_retries` times; then the task logs and gives up, returning None: the periodic
    reconcilers and syncs pick the work up again, so nothing waits on a retry forever. Any
    other error is permanent and never retried (the services store it on their rows).

    `on_retry(exc, attempt, next_at, *args, **kwargs)`, when given, is told of each failed try
    (next_at None when the task gives up), so that the people waiting can be told too.
    """

    def decorate(fn):
        @app.task(name=name, bind=True, ignore_result=True, max_retries=max_retries, **options)
        @functools.wraps(fn)
        def run(self, *args, **kwargs):
            try:
                return fn(*args, **kwargs)
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


@signals.task_prerun.connect
@signals.task_postrun.connect
def _close_old_connections(sender=None, **kwargs):
    """What Django does around each request: drop connections that broke or outlived
    CONN_MAX_AGE (the fixup no longer closes them around every task, see settings). Eager
    tasks run inside their caller's transaction, whose connection must stay."""
    from django.db import close_old_connections

    if not getattr(getattr(sender, "request", None), "is_eager", False):
        close_old_connections()


@signals.worker_process_init.connect
def _release_dead_claims(**kwargs):
    """A new worker process (after one was killed, say) takes over the jobs that a process on
    this host claimed and can no longer apply, instead of leaving them for the claim's TTL, and
    queues again the what-if runs such a process was replaying."""
    from django.db import DatabaseError, connection

    from queues.services.job_apply import claims_release_dead
    from queues.services.whatif import whatif_release_dead

    try:
        claims_release_dead()
        whatif_release_dead()  # and the what-if replays such a process was in the middle of
    except DatabaseError as exc:  # the database is not up yet: the claims' TTL still applies
        logger.warning("could not release dead workers' claims: %s", exc)
    finally:
        connection.close()  # the forked child must not keep a connection made while starting


app.conf.beat_schedule = {
    "portal-heartbeat": {"task": "fleet.heartbeat", "schedule": 60.0},
    "portal-send-unsent": {"task": "fleet.send_unsent", "schedule": 15.0},
    "fleet-sync-inventory": {"task": "fleet.sync_inventory", "schedule": 60.0},
    # Expires so that a busy worker skips stale ticks instead of running them back to back.
    "queues-sync-jobs": {"task": "queues.sync_jobs", "schedule": 3.0, "options": {"expires": 10}},
    "queues-reconcile-all": {"task": "queues.reconcile_all", "schedule": 60.0},
    "queues-check-drift": {"task": "queues.check_drift", "schedule": 120.0},
    "queues-expire-burst-grants": {"task": "queues.expire_burst_grants", "schedule": 60.0},
    "queues-resume-whatifs": {"task": "queues.resume_whatifs", "schedule": 60.0},
    "billing-scrape-dcgm": {"task": "billing.scrape_dcgm", "schedule": 30.0},
    "billing-ingest-hours": {"task": "billing.ingest_hours", "schedule": 300.0},
    "billing-check-budgets": {"task": "billing.check_budgets", "schedule": 300.0},
    "billing-refresh-days": {"task": "billing.refresh_days", "schedule": 300.0},
    "billing-sample-borrowing": {"task": "billing.sample_borrowing", "schedule": 60.0},
    "billing-enforce-idle": {"task": "billing.enforce_idle", "schedule": 60.0},
}
