"""Billing tasks: direct DCGM scrapes, Prometheus hourly ingestion and backfill, re-attribution,
budget checks."""

import logging
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from billing import dcgm
from billing.selectors.usage import default_cluster, hours_missing, metered_clusters
from billing.services.budgets import budgets_check_all
from billing.services.gpufaults import (
    gpu_faults_contain_all,
    gpu_health_read,
    gpu_nodes_return_all,
)
from billing.services.idle import idle_enforce, idle_observe, idle_watch_prometheus
from billing.services.ledger import ledger_sample_all
from billing.services.rollups import usage_days_refresh_dirty
from billing.services.usage import (
    usage_hour_ingest,
    usage_pod_lifetimes_apply,
    usage_reattribute,
    usage_scrape_failed,
    usage_scrape_record,
)
from core.worker import task
from fleet.services.clusters import cluster_metrics_sources

log = logging.getLogger(__name__)
# Usage of the last hours is attached to pods recorded late (a pod's row is written by the sync).
REATTRIBUTE_WINDOW = timedelta(hours=3)


def _billed_by(cluster, default) -> tuple[list[str], str]:
    """(exporter URLs to scrape, Prometheus URL) billing reads a cluster's metrics from: one
    of the two at most. BILLING_SOURCE=scrape or =prometheus is obeyed even when the other is
    set, so two sources never write the same hours; "auto" prefers a Prometheus."""
    urls, prometheus = cluster_metrics_sources(
        cluster, default=default is not None and cluster.pk == default.pk
    )
    source = settings.BILLING_SOURCE
    if source != "scrape" and prometheus:
        return [], prometheus
    if source != "prometheus" and urls:
        return urls, ""
    return [], ""


@task(name="billing.scrape_dcgm")
def scrape_dcgm() -> int:
    """Scrape every cluster's exporters once and credit the samples to that cluster (beat:
    every 30 s); one exporter that does not answer costs only its own samples."""
    credited = 0
    default = default_cluster()
    for cluster in metered_clusters():
        urls, _ = _billed_by(cluster, default)
        for url in urls:
            try:
                samples = dcgm.scrape(url)
            except dcgm.MetricsError as exc:
                # The next beat tick is the retry; what was credited before stays.
                log.warning("billing: %s: %s", cluster.name, exc)
                usage_scrape_failed(cluster=cluster, url=url, error=str(exc))
                continue
            scraped_at = timezone.now()
            credited += usage_scrape_record(
                cluster=cluster, url=url, samples=samples, scraped_at=scraped_at
            )
            idle_observe(cluster=cluster, samples=samples, scraped_at=scraped_at)
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
    """Ingest closed hours from each cluster's Prometheus, backfilling missed ones."""
    days = int(settings.BILLING_BACKFILL_DAYS)
    done = 0
    default = default_cluster()
    for cluster in metered_clusters():
        _, url = _billed_by(cluster, default)
        if not url:
            continue
        client = dcgm.Prometheus(base_url=url)
        for hour in hours_missing(cluster=cluster, days=days)[:max_hours]:
            usage_hour_ingest(cluster=cluster, hour=hour, client=client)
            done += 1
    return done


@task(name="billing.reattribute_usage", acks_late=True)
def reattribute_usage() -> int:
    """Attach the last hours' usage that was seen before its pod was recorded to the job and
    its team, and give finished pods their exact seconds (beat: every 5 minutes)."""
    since = timezone.now() - REATTRIBUTE_WINDOW
    attached = usage_reattribute(since=since)
    usage_pod_lifetimes_apply(since=since)
    return attached


@task(name="billing.check_budgets", acks_late=True)
def check_budgets() -> int:
    """Check this month's budgets (alerts, holds) and release holds of past months."""
    return budgets_check_all()


@task(name="billing.refresh_days", acks_late=True)
def refresh_days() -> int:
    """Rebuild the daily summaries of past days whose hours changed (beat: every 5 minutes)."""
    return usage_days_refresh_dirty()


@task(name="billing.sample_borrowing")
def sample_borrowing() -> dict:
    """Credit the last minute of borrowing and lending to the ledger (beat: every 60 s)."""
    return ledger_sample_all()


@task(name="billing.enforce_idle")
def enforce_idle() -> dict:
    """Look at the GPUs of clusters metered through Prometheus (the others are seen at each
    scrape), then warn about jobs holding idle GPUs and apply their tier's policy (beat: every
    60 s)."""
    default = default_cluster()
    for cluster in metered_clusters():
        _, url = _billed_by(cluster, default)
        if url:
            idle_watch_prometheus(cluster=cluster, url=url)
    return idle_enforce()


@task(name="billing.gpu_fault_loop", acks_late=True)
def gpu_fault_loop() -> dict:
    """The GPU fault loop (billing.services.gpufaults): read every cluster's GPU health, then
    contain open faults (taint, stop, resubmit, credit, tell) and return the nodes admins
    released (beat: every 30 s). Every step is idempotent, so a run killed half-way is
    finished by the next."""
    now = timezone.now()
    default = default_cluster()
    seen = 0
    for cluster in metered_clusters():
        urls, prometheus = _billed_by(cluster, default)
        try:
            seen += gpu_health_read(cluster=cluster, urls=urls, prometheus=prometheus, at=now)
        except dcgm.MetricsError as exc:
            log.warning("gpu health of %s: %s", cluster.name, exc)
    contained = gpu_faults_contain_all(now=now)
    return {"gpus": seen, **contained, "returned": gpu_nodes_return_all(now=now)}
