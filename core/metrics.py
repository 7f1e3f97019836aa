"""Prometheus metrics of the portal: what an operator watches and alerts on (README, "Metrics").

Two kinds:

- What the processes do, counted where it happens: HTTP requests (web), Celery tasks run, their
  wait in the queue and their retries (workers), tasks sent (web, workers, beat), Kubernetes
  request errors and retries, job applies, job transitions and queue wait, what-if runs. Where
  processes fork (gunicorn's workers, Celery's prefork pool) prometheus-client's multiprocess
  mode adds every process's figures up: `scripts/serve` sets PROMETHEUS_MULTIPROC_DIR.
- The state of the fleet, read from the database and the broker when /metrics is scraped (web
  only, so that one scrape answers it): jobs by state and team, each cluster's health and
  breaker, the Celery queue's depth, the last worker heartbeat, billing ingestion lag and gaps.
  Each app registers its own reader (`register_state`), so core imports none of them.

Web serves /metrics; workers and beat serve theirs on METRICS_PORT (a thread of their main
process, started by `connect`). Both ask for METRICS_TOKEN as a bearer token when it is set.
"""

from __future__ import annotations

import hmac
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from wsgiref.simple_server import WSGIRequestHandler, make_server

from django.conf import settings
from django.http import HttpResponse
from kombu.exceptions import ChannelError
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    make_wsgi_app,
    multiprocess,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

logger = logging.getLogger(__name__)

# Seconds: from a millisecond to an hour (tasks), and to two days (a job's wait for admission).
TASK_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400, 172800)

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
TASK_DURATION = Histogram(
    "quartermaster_celery_task_duration_seconds",
    "Time a Celery task ran, by task and outcome (success, failure, retry).",
    ["task", "outcome"],
    buckets=TASK_BUCKETS,
)
TASK_WAIT = Histogram(
    "quartermaster_celery_task_wait_seconds",
    "Time a Celery task waited in the queue: from sent (or its ETA) to started.",
    ["task"],
    buckets=TASK_BUCKETS,
)
TASK_RETRIES = Counter(
    "quartermaster_celery_task_retries_total", "Celery tasks that asked to be retried.", ["task"]
)
TASKS_SENT = Counter(
    "quartermaster_celery_tasks_sent_total",
    "Celery tasks sent to the broker by this kind of process (beat: its schedule).",
    ["task"],
)
KUBE_ERRORS = Counter(
    "quartermaster_kube_request_errors_total",
    "Kubernetes API requests that failed, by cluster and error: the HTTP status the API server "
    "answered, or unreachable (no answer: the cluster's breaker opens).",
    ["cluster", "error"],
)
KUBE_RETRIES = Counter(
    "quartermaster_kube_request_retries_total",
    "Kubernetes API requests sent again after a transient error.",
    ["cluster"],
)
JOB_APPLIES = Counter(
    "quartermaster_job_applies_total",
    "Jobs the workers tried to create in their cluster, by cluster and outcome (applied, "
    "failed, waiting, skipped).",
    ["cluster", "outcome"],
)
JOB_APPLY_RETRIES = Counter(
    "quartermaster_job_apply_retries_total",
    "Apply tasks retried after a transient error from the cluster.",
    ["cluster"],
)
JOB_TRANSITIONS = Counter(
    "quartermaster_job_transitions_total", "Jobs that moved to a state.", ["state"]
)
JOB_QUEUE_WAIT = Histogram(
    "quartermaster_job_queue_wait_seconds",
    "Time a job waited from its submission until its cluster admitted it.",
    buckets=WAIT_BUCKETS,
)
WHATIF_RUNS = Counter(
    "quartermaster_whatif_runs_total", "What-if replays finished, by outcome.", ["outcome"]
)
WHATIF_DURATION = Histogram(
    "quartermaster_whatif_run_duration_seconds",
    "Time a what-if replay took.",
    buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1800),
)

# -- the state of the fleet, read at scrape time ---------------------------------------------

StateReader = Callable[[], Iterable[Metric]]
_STATE_READERS: dict[str, StateReader] = {}


def register_state(name: str, reader: StateReader) -> None:
    """Add a reader of the fleet's state to web's /metrics (each app's AppConfig.ready)."""
    _STATE_READERS[name] = reader


def gauge(name: str, documentation: str, labels: Iterable[str] = ()) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, labels=list(labels))


class FleetState(Collector):
    """Every registered reader's metrics; a reader that fails (the database is down) is left out
    and counted in quartermaster_state_read_errors, so one outage does not blank the scrape."""

    def collect(self):
        failed = gauge(
            "quartermaster_state_read_errors",
            "Readers of the fleet's state that failed in this scrape (1: the reader failed).",
            ["reader"],
        )
        for name, reader in sorted(_STATE_READERS.items()):
            try:
                families = list(reader())
            except Exception as exc:  # noqa: BLE001 - any failure leaves that reader out
                logger.warning("metrics: the %s state could not be read: %s", name, exc)
                failed.add_metric([name], 1)
                continue
            failed.add_metric([name], 0)
            yield from families
        yield failed


def celery_queue_state() -> Iterable[Metric]:
    """The broker's queue depth, and the messages kept in the database while it was down."""
    from celery import current_app

    from core.models import UnsentTask, WorkerHeartbeat

    queue = settings.CELERY_TASK_DEFAULT_QUEUE
    depth = gauge(
        "quartermaster_celery_queue_length", "Messages waiting in the Celery queue.", ["queue"]
    )
    up = gauge("quartermaster_broker_up", "1 when the Celery broker answered this scrape.")
    try:
        with current_app.connection_for_read(url=settings.CELERY_BROKER_URL) as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
            with conn.channel() as channel:
                try:
                    _, messages, _ = channel.queue_declare(queue=queue, passive=True)
                except ChannelError:  # not declared yet: no worker started, nothing sent
                    messages = 0
        depth.add_metric([queue], messages)
        up.add_metric([], 1)
    except Exception as exc:  # noqa: BLE001 - a broker that does not answer is the answer
        logger.warning("metrics: the broker did not answer: %s", exc)
        up.add_metric([], 0)
    yield depth
    yield up
    unsent = gauge(
        "quartermaster_celery_unsent_tasks",
        "Celery messages kept in the database while the broker was down, not sent yet.",
    )
    unsent.add_metric([], UnsentTask.objects.count())
    yield unsent
    beat = gauge(
        "quartermaster_worker_heartbeat_timestamp_seconds",
        "When a worker last ran the heartbeat task beat sends every minute (Unix time).",
    )
    last = WorkerHeartbeat.objects.order_by("-seen_at").values_list("seen_at", flat=True).first()
    if last is not None:
        beat.add_metric([], last.timestamp())
    yield beat


# -- Celery: tasks run, waited, retried, sent -------------------------------------------------

_started: dict[str, float] = {}


def _task_name(sender) -> str:
    return getattr(sender, "name", None) or str(sender)


def _task_prerun(sender=None, task_id=None, task=None, **_):
    if task is None or getattr(task.request, "is_eager", False):
        return
    _started[task_id] = time.monotonic()
    # The header the sender added (_before_publish); a task with an ETA waited from then on.
    sent = _seconds(getattr(task.request, "qm_sent_at", None))
    if sent is None:
        return
    eta = task.request.eta
    if eta:
        sent = max(sent, _seconds(eta) or sent)
    TASK_WAIT.labels(_task_name(task)).observe(max(0.0, time.time() - sent))


def _seconds(value) -> float | None:
    """Unix time from a number or an ISO 8601 string (a task's ETA); None when neither."""
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value).timestamp()
        except ValueError:
            return None
    return None


def _task_postrun(sender=None, task_id=None, task=None, state=None, **_):
    began = _started.pop(task_id, None)
    if began is None or task is None:
        return
    outcome = {"SUCCESS": "success", "RETRY": "retry"}.get(state or "", "failure")
    TASK_DURATION.labels(_task_name(task), outcome).observe(time.monotonic() - began)


def _task_retry(sender=None, **_):
    TASK_RETRIES.labels(_task_name(sender)).inc()


def _before_publish(sender=None, headers=None, **_):
    if headers is not None:
        headers.setdefault("qm_sent_at", time.time())
    TASKS_SENT.labels(str(sender)).inc()


# -- serving them ------------------------------------------------------------------------------


CHALLENGE = 'Bearer realm="metrics"'


def _authorized(sent: str) -> bool:
    token = settings.METRICS_TOKEN
    if not token:
        return True
    return hmac.compare_digest(sent.encode(), f"Bearer {token}".encode())


def process_registry(*, state: bool) -> CollectorRegistry:
    """This process's metrics (every process's, added up, in multiprocess mode), and the
    fleet's state when asked."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    else:
        registry = CollectorRegistry()
        registry.register(_Everything())
    if state:
        registry.register(FleetState())
    return registry


class _Everything(Collector):
    """The default registry's metrics, in a registry of their own beside the fleet's state."""

    def collect(self):
        yield from REGISTRY.collect()


def metrics_view(request):
    """Web's metrics in the Prometheus text format: every worker's, added up, and the fleet's."""
    if not _authorized(request.headers.get("Authorization", "")):
        response = HttpResponse("Send the metrics token: Authorization: Bearer <token>.\n",
                                status=401, content_type="text/plain")  # fmt: skip
        response["WWW-Authenticate"] = CHALLENGE
        return response
    registry = process_registry(state=True)
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args):  # scrapes every few seconds: not worth a log line each
        pass


def serve(port: int, *, host: str = "0.0.0.0") -> threading.Thread:  # noqa: S104 - pod's port
    """Serve this process's metrics at http://host:port/metrics from a daemon thread (workers'
    and beat's main process), behind METRICS_TOKEN when it is set."""
    exposed = make_wsgi_app(process_registry(state=False))

    def app(environ, start_response):
        if not _authorized(environ.get("HTTP_AUTHORIZATION", "")):
            headers = [("Content-Type", "text/plain"), ("WWW-Authenticate", CHALLENGE)]
            start_response("401 Unauthorized", headers)
            return [b"Send the metrics token: Authorization: Bearer <token>.\n"]
        return exposed(environ, start_response)

    server = make_server(host, port, app, handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True, name="metrics")
    thread.start()
    logger.info("metrics served on %s:%s/metrics", host, port)
    return thread


def _serve_from_main_process(**_signal) -> None:
    port = settings.METRICS_PORT
    if port:
        serve(port)


def _process_exited(pid=None, **_signal) -> None:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.mark_process_dead(pid or os.getpid())


def connect() -> None:
    """Count Celery tasks in every process, and serve the metrics of workers and beat."""
    from celery import signals

    hooks = (
        (signals.task_prerun, _task_prerun),
        (signals.task_postrun, _task_postrun),
        (signals.task_retry, _task_retry),
        (signals.before_task_publish, _before_publish),
        (signals.worker_init, _serve_from_main_process),
        (signals.beat_init, _serve_from_main_process),
        (signals.worker_process_shutdown, _process_exited),
    )
    for signal, hook in hooks:
        signal.connect(hook, weak=False, dispatch_uid=f"core-metrics-{hook.__name__}")
    register_state("celery", celery_queue_state)


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
