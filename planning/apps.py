"""Django app configuration of planning: what looks ahead (the what-if simulator, quota evidence,
recommendations and auto-approval), on top of queues and billing, which it hooks into here."""

from django.apps import AppConfig


def release_dead_replays() -> None:
    """A new worker process (after one was killed, say) queues again the what-if runs that a
    process on this host was replaying and that no longer exists."""
    from planning.services.whatif import whatif_release_dead

    whatif_release_dead()


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
        # Each new Celery worker process, before it takes a task (the database not up yet: the
        # beat queues the runs again once their claims are old).
        from core.worker import at_worker_process_start

        at_worker_process_start(
            release_dead_replays,
            failing="release dead workers' what-if runs",
            dispatch_uid="planning-release-replays",
        )
