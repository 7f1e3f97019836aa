"""Django app configuration of planning: what looks ahead (the what-if simulator, quota evidence,
recommendations and auto-approval), on top of queues and billing, which it hooks into here."""

import logging

from django.apps import AppConfig

logger = logging.getLogger(__name__)


def release_dead_replays(**kwargs) -> None:
    """A new worker process (after one was killed, say) queues again the what-if runs that a
    process on this host was replaying and that no longer exists."""
    from django.db import DatabaseError, connection

    from planning.services.whatif import whatif_release_dead

    try:
        whatif_release_dead()
    except DatabaseError as exc:  # the database is not up yet: the claims' TTL still applies
        logger.warning("could not release dead workers' what-if runs: %s", exc)
    finally:
        connection.close()  # the forked child must not keep a connection made while starting


class PlanningConfig(AppConfig):
    name = "planning"
    verbose_name = "Planning"

    def ready(self):
        # queues cannot import planning; it asks whoever listens whether a filed quota request
        # is decided at once (the auto-approval rule).
        from planning.services.auto_approval import on_quota_request_filed
        from queues.services.quotas import quota_request_filed

        quota_request_filed.connect(
            on_quota_request_filed, dispatch_uid="planning-auto-approval-on-quota-request-filed"
        )
        # Each new Celery worker process, before it takes a task.
        from celery.signals import worker_process_init

        worker_process_init.connect(release_dead_replays, dispatch_uid="planning-release-replays")
