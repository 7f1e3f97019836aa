"""Billing tasks: direct DCGM scrapes, Prometheus hourly ingestion and backfill, budget checks."""

import logging
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from billing import dcgm
from billing.periods import month_start
from billing.selectors.budgets import budgets_of_month
from billing.selectors.usage import default_cluster, hours_missing
from billing.services.budgets import budget_check, budgets_release_past
from billing.services.rollups import usage_days_refresh_dirty
from billing.services.usage import (
    usage_hour_ingest,
    usage_pod_lifetimes_apply,
    usage_reattribute,
    usage_scrape_failed,
    usage_scrape_record,
)
from config.celery import task

log = logging.getLogger(__name__)


def _scrape_enabled() -> bool:
    source = settings.BILLING_SOURCE
    return source == "scrape" or (source == "auto" and not settings.PROMETHEUS_URL)


def _prometheus_enabled() -> bool:
    """BILLING_SOURCE=scrape is obeyed even when PROMETHEUS_URL is set (one source, never both
    writing the same hours)."""
    source = settings.BILLING_SOURCE
    return bool(settings.PROMETHEUS_URL) and source in ("prometheus", "auto")


@task(name="billing.scrape_dcgm")
def scrape_dcgm() -> int:
    """Scrape every exporter URL once and credit the samples (beat: every 30 s)."""
    if not _scrape_enabled():
        return 0
    cluster = default_cluster()
    if cluster is None:
        return 0
    credited = 0
    for url in settings.DCGM_SCRAPE_URLS:
        try:
            samples = dcgm.scrape(url)
        except dcgm.MetricsError as exc:
            # The next beat tick is the retry; what was credited before stays.
            log.warning("billing: %s", exc)
            usage_scrape_failed(cluster=cluster, url=url, error=str(exc))
            continue
        credited += usage_scrape_record(
            cluster=cluster, url=url, samples=samples, scraped_at=timezone.now()
        )
    return credited


# A Prometheus that does not answer is tried again for about an hour; then the next beat tick.
@task(
    name="billing.ingest_hours",
    transient=(dcgm.MetricsError,),
    acks_late=True,
    backoff_base=15.0,
    backoff_cap=600.0,
)
def ingest_hours(max_hours: int = 24) -> int:
    """Ingest closed hours from Prometheus, backfilling any missed in the last days."""
    if not _prometheus_enabled():
        return 0
    cluster = default_cluster()
    if cluster is None:
        return 0
    days = int(settings.BILLING_BACKFILL_DAYS)
    done = 0
    for hour in hours_missing(cluster=cluster, days=days)[:max_hours]:
        usage_hour_ingest(cluster=cluster, hour=hour)
        done += 1
    return done


@task(name="billing.check_budgets", acks_late=True)
def check_budgets() -> int:
    """Check this month's budgets (alerts, holds) and release holds of past months."""
    now = timezone.now()
    usage_reattribute(since=now - timedelta(hours=3))
    usage_pod_lifetimes_apply(since=now - timedelta(hours=3))
    budgets_release_past(now=now)
    checked = 0
    for budget in budgets_of_month(month=month_start(now)):
        budget_check(budget=budget, now=now)
        checked += 1
    return checked


@task(name="billing.refresh_days", acks_late=True)
def refresh_days() -> int:
    """Rebuild the daily summaries of past days whose hours changed (beat: every 5 minutes)."""
    return usage_days_refresh_dirty()
