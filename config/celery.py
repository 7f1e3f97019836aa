"""The one Celery app, configured from Django settings; the beat schedule lives here."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("quartermaster")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
# Jobs keep their tasks apart from governance's queues/tasks.py.
app.autodiscover_tasks(related_name="job_tasks")

app.conf.beat_schedule = {
    "portal-heartbeat": {"task": "fleet.heartbeat", "schedule": 60.0},
    "fleet-sync-inventory": {"task": "fleet.sync_inventory", "schedule": 60.0},
    # Expires so that a busy worker skips stale ticks instead of running them back to back.
    "queues-sync-jobs": {"task": "queues.sync_jobs", "schedule": 3.0, "options": {"expires": 10}},
    "queues-reconcile-all": {"task": "queues.reconcile_all", "schedule": 60.0},
    "queues-check-drift": {"task": "queues.check_drift", "schedule": 120.0},
    "queues-expire-burst-grants": {"task": "queues.expire_burst_grants", "schedule": 60.0},
    "billing-scrape-dcgm": {"task": "billing.scrape_dcgm", "schedule": 30.0},
    "billing-ingest-hours": {"task": "billing.ingest_hours", "schedule": 300.0},
    "billing-check-budgets": {"task": "billing.check_budgets", "schedule": 300.0},
    "billing-refresh-days": {"task": "billing.refresh_days", "schedule": 300.0},
}
