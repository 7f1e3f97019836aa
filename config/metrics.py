"""Prometheus metrics for the portal itself, served at /metrics."""

import time

from django.http import HttpResponse
from prometheus_client import CONTENT_TYPE_LATEST, Counter, Histogram, generate_latest

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


def metrics_view(request):
    """Expose the process's metrics in the Prometheus text format."""
    return HttpResponse(generate_latest(), content_type=CONTENT_TYPE_LATEST)
