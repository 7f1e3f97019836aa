"""The one Celery app, configured from Django settings; the beat schedule lives here.

Every task is a core.worker.PortalTask (named, so that config imports no app), made with the
one retry policy (core.worker.task); each app hooks its worker start-up work in its own
AppConfig.ready (queues releases the job claims of dead worker processes, for one)."""

import os

from celery import Celery, signals

from config import broker  # noqa: F401 (registers the embedded default's sqlite:// transport)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("quartermaster", task_cls="core.worker:PortalTask")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@signals.task_prerun.connect
@signals.task_postrun.connect
def _close_old_connections(sender=None, **kwargs):
    """What Django does around each request: drop connections that broke or outlived
    CONN_MAX_AGE (the fixup no longer closes them around every task, see settings). Eager
    tasks run inside their caller's transaction, whose connection must stay."""
    from django.db import close_old_connections

    if not getattr(getattr(sender, "request", None), "is_eager", False):
        close_old_connections()


app.conf.beat_schedule = {
    "portal-heartbeat": {"task": "fleet.heartbeat", "schedule": 60.0},
    "portal-send-unsent": {"task": "fleet.send_unsent", "schedule": 15.0},
    "fleet-sync-inventory": {"task": "fleet.sync_inventory", "schedule": 60.0},
    # Expires so that a busy worker skips stale ticks instead of running them back to back.
    "queues-sync-jobs": {"task": "queues.sync_jobs", "schedule": 3.0, "options": {"expires": 10}},
    "queues-reconcile-all": {"task": "queues.reconcile_all", "schedule": 60.0},
    "queues-check-drift": {"task": "queues.check_drift", "schedule": 120.0},
    "queues-expire-burst-grants": {"task": "queues.expire_burst_grants", "schedule": 60.0},
    "queues-advance-reservations": {"task": "queues.advance_reservations", "schedule": 30.0},
    "queues-resume-whatifs": {"task": "queues.resume_whatifs", "schedule": 60.0},
    "queues-protection-sweep": {
        "task": "queues.protection_sweep",
        "schedule": 30.0,
        "options": {"expires": 30},
    },
    "billing-scrape-dcgm": {"task": "billing.scrape_dcgm", "schedule": 30.0},
    "billing-ingest-hours": {"task": "billing.ingest_hours", "schedule": 300.0},
    "billing-reattribute-usage": {"task": "billing.reattribute_usage", "schedule": 300.0},
    "billing-check-budgets": {"task": "billing.check_budgets", "schedule": 300.0},
    "billing-refresh-days": {"task": "billing.refresh_days", "schedule": 300.0},
    "billing-sample-borrowing": {"task": "billing.sample_borrowing", "schedule": 60.0},
    "billing-enforce-idle": {"task": "billing.enforce_idle", "schedule": 60.0},
    "billing-gpu-fault-loop": {"task": "billing.gpu_fault_loop", "schedule": 30.0},
}
