"""Billing tasks: direct DCGM scrapes, Prometheus hourly ingestion and backfill, budget checks."""

import logging
from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from billing import dcgm, services
from billing.models import Budget

log = logging.getLogger(__name__)


def _scrape_enabled() -> bool:
    source = settings.BILLING_SOURCE
    return source == "scrape" or (source == "auto" and not settings.PROMETHEUS_URL)


@shared_task(name="billing.scrape_dcgm", ignore_result=True)
def scrape_dcgm() -> int:
    """Scrape every exporter URL once and credit the samples (beat: every 30 s)."""
    if not _scrape_enabled():
        return 0
    cluster = services.default_cluster()
    if cluster is None:
        return 0
    credited = 0
    for url in settings.DCGM_SCRAPE_URLS:
        try:
            samples = dcgm.scrape(url)
        except dcgm.MetricsError as exc:
            # The next beat tick is the retry; what was credited before stays.
            log.warning("billing: %s", exc)
            services.usage_scrape_failed(cluster=cluster, url=url, error=str(exc))
            continue
        credited += services.usage_scrape_record(
            cluster=cluster, url=url, samples=samples, scraped_at=timezone.now()
        )
    return credited


@shared_task(
    name="billing.ingest_hours",
    bind=True,
    ignore_result=True,
    acks_late=True,
    max_retries=5,
)
def ingest_hours(self, max_hours: int = 24) -> int:
    """Ingest closed hours from Prometheus, backfilling any missed in the last days."""
    if not settings.PROMETHEUS_URL:
        return 0
    cluster = services.default_cluster()
    if cluster is None:
        return 0
    days = int(settings.BILLING_BACKFILL_DAYS)
    done = 0
    for hour in services.hours_missing(cluster=cluster, days=days)[:max_hours]:
        try:
            services.usage_hour_ingest(cluster=cluster, hour=hour)
        except dcgm.MetricsError as exc:
            raise self.retry(exc=exc, countdown=min(600, 15 * 2**self.request.retries)) from exc
        done += 1
    return done


@shared_task(name="billing.check_budgets", ignore_result=True, acks_late=True)
def check_budgets() -> int:
    """Check this month's budgets (alerts, holds) and release holds of past months."""
    now = timezone.now()
    services.usage_reattribute(since=now - timedelta(hours=3))
    services.usage_pod_lifetimes_apply(since=now - timedelta(hours=3))
    services.budgets_release_past(now=now)
    checked = 0
    for budget in Budget.objects.select_related("team", "team__department").filter(
        month=services.month_start(now)
    ):
        services.budget_check(budget=budget, now=now)
        checked += 1
    return checked


@shared_task(name="billing.refresh_days", ignore_result=True, acks_late=True)
def refresh_days() -> int:
    """Rebuild the daily summaries of past days whose hours changed (beat: every 5 minutes)."""
    return services.usage_days_refresh_dirty()
