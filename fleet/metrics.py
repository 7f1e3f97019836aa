"""The clusters' state for /metrics (core.metrics reads it at scrape time): whether each answers,
its breaker, how long it has been unreachable and its API latency, as the workers' requests
recorded them on the Cluster row (fleet.kube.health)."""

from __future__ import annotations

from collections.abc import Iterable

from django.utils import timezone

from core.metrics import gauge
from fleet.models import Cluster


def cluster_state() -> Iterable:
    now = timezone.now()
    up = gauge("quartermaster_cluster_up", "1 when the cluster answered its last requests.",
               ["cluster"])  # fmt: skip
    enabled = gauge("quartermaster_cluster_enabled", "1 when the cluster takes new jobs.",
                    ["cluster"])  # fmt: skip
    breaker = gauge(
        "quartermaster_cluster_breaker_open",
        "1 while the cluster's breaker is open: no request until its next try.",
        ["cluster"],
    )
    down = gauge(
        "quartermaster_cluster_unreachable_seconds",
        "How long the cluster has not answered (0 while it answers).",
        ["cluster"],
    )
    latency = gauge(
        "quartermaster_cluster_api_latency_seconds",
        "The cluster API server's recent latency (a moving average of the requests).",
        ["cluster"],
    )
    contact = gauge(
        "quartermaster_cluster_last_contact_timestamp_seconds",
        "When the cluster last answered (Unix time).",
        ["cluster"],
    )
    rows = Cluster.objects.filter(deleted_at__isnull=True).values(
        "name", "enabled", "unreachable_since", "retry_at", "api_latency_ms", "last_contact_at"
    )
    for row in rows:
        name = [row["name"]]
        since = row["unreachable_since"]
        up.add_metric(name, 0 if since else 1)
        enabled.add_metric(name, 1 if row["enabled"] else 0)
        breaker.add_metric(name, 1 if since and row["retry_at"] and row["retry_at"] > now else 0)
        down.add_metric(name, (now - since).total_seconds() if since else 0)
        if row["api_latency_ms"] is not None:
            latency.add_metric(name, row["api_latency_ms"] / 1000.0)
        if row["last_contact_at"] is not None:
            contact.add_metric(name, row["last_contact_at"].timestamp())
    return [up, enabled, breaker, down, latency, contact]
