"""Prometheus metrics for the portal itself, served at /metrics: the sum over every gunicorn
worker (prometheus-client's multiprocess mode, when PROMETHEUS_MULTIPROC_DIR is set), behind a
bearer token when METRICS_TOKEN is set."""

import hmac
import os
import time

from django.conf import settings
from django.http import HttpResponse
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
)

REQUESTS = Counter(
    "quartermaster_http_requests_total",
    "HTTP requests served by the portal.",
    ["method", "status"],
)
LATENCY = Histogram(
    "quartermaster_http_request_duration_seconds",
    "Time spent serving HTTP requests.",
    ["method"],
)


class RequestMetricsMiddleware:
    """Counts requests and their latency by method and status class."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        started = time.perf_counter()
        response = self.get_response(request)
        LATENCY.labels(request.method).observe(time.perf_counter() - started)
        REQUESTS.labels(request.method, f"{response.status_code // 100}xx").inc()
        return response


def _authorized(request) -> bool:
    token = settings.METRICS_TOKEN
    if not token:
        return True
    sent = request.headers.get("Authorization", "")
    return hmac.compare_digest(sent.encode(), f"Bearer {token}".encode())


def metrics_view(request):
    """Expose the metrics in the Prometheus text format: every worker's, added up."""
    if not _authorized(request):
        response = HttpResponse("Send the metrics token: Authorization: Bearer <token>.\n",
                                status=401, content_type="text/plain")  # fmt: skip
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
    return HttpResponse(generate_latest(), content_type=CONTENT_TYPE_LATEST)
