"""Billing ingestion's state for /metrics (core.metrics reads it at scrape time), for each
cluster billing meters (one with an ingested hour or a scrape): how far behind its newest GPU
sample is, the hours Prometheus ingestion failed, and the usage rows with a gap in their series
over the backfill window."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta

from django.conf import settings
from django.db.models import Count, Max, Q
from django.utils import timezone

from billing.models import IngestState, ScrapeState, UsageHour
from core.metrics import gauge
from fleet.models import Cluster


def ingestion_state() -> Iterable:
    now = timezone.now()
    window = timedelta(days=settings.BILLING_BACKFILL_DAYS)
    since = now - window
    metered = set(IngestState.objects.values_list("cluster_id", flat=True).distinct())
    metered |= set(ScrapeState.objects.values_list("cluster_id", flat=True).distinct())
    names = dict(
        Cluster.objects.filter(pk__in=metered, deleted_at__isnull=True).values_list("pk", "name")
    )
    usage = {
        row["cluster_id"]: row
        for row in UsageHour.objects.filter(cluster_id__in=names, hour__gte=since)
        .values("cluster_id")
        .annotate(last=Max("last_sample_at"), gaps=Count("pk", filter=Q(flag_gap=True)))
        .order_by()
    }
    failed = dict(
        IngestState.objects.filter(
            cluster_id__in=names, state=IngestState.State.FAILED, hour__gte=since
        )
        .values_list("cluster_id")
        .annotate(n=Count("pk"))
        .order_by()
    )
    last = gauge(
        "quartermaster_billing_last_sample_timestamp_seconds",
        "The newest GPU sample billing has ingested for the cluster (Unix time).",
        ["cluster"],
    )
    lag = gauge(
        "quartermaster_billing_ingestion_lag_seconds",
        "How far behind now the cluster's newest ingested GPU sample is (the backfill window "
        "when it has none in it).",
        ["cluster"],
    )
    gaps = gauge(
        "quartermaster_billing_gap_rows",
        "Usage rows of the backfill window whose GPU series has a gap.",
        ["cluster"],
    )
    failures = gauge(
        "quartermaster_billing_failed_hours",
        "Hours of the backfill window whose ingestion from Prometheus failed.",
        ["cluster"],
    )
    for pk, name in names.items():
        row = usage.get(pk) or {}
        newest = row.get("last")
        if newest is not None:
            last.add_metric([name], newest.timestamp())
        lag.add_metric([name], (now - newest).total_seconds() if newest else window.total_seconds())
        gaps.add_metric([name], row.get("gaps", 0))
        failures.add_metric([name], failed.get(pk, 0))
    return [last, lag, gaps, failures]
