"""Each cluster's health as its requests find it, and the circuit breaker that keeps a dead
cluster from holding up the workers.

A request that cannot reach the API server (refused, timed out, reset) opens the breaker: until
`retry_at` every request to that cluster fails at once with `ClusterUnavailable`, without
touching the network, so a worker spends at most one timeout per window on it. The window is
half of how long the cluster has been down (5 s up to 5 min); then one request tries again, and
an answer closes the breaker. Across processes, the tasks that talk to a cluster ask
fleet.services.cluster_health first: while the window is open they leave it alone, and when it
has run out one worker (the first to claim it) tries, the others wait for its answer.
Errors the API server answers with (a 500, a 422) do not open it: the cluster is there, and
those are each request's business.

The state lives in each process (no query per request) and is written to the Cluster row when
it changes, and at most every CONTACT_WRITE_SECONDS while it stays healthy, so that the pages,
the other workers (fleet.services.cluster_health) and the jobs waiting for the cluster can
say what is wrong.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta

from django.db import DatabaseError
from django.db.models.functions import Coalesce
from django.db.transaction import TransactionManagementError
from django.utils import timezone

from fleet.kube.errors import TransientError

log = logging.getLogger(__name__)

BREAKER_FIRST_SECONDS = 5.0
BREAKER_MAX_SECONDS = 300.0
CONTACT_WRITE_SECONDS = 15.0


class ClusterUnavailable(TransientError):
    """The cluster did not answer lately; the breaker refuses requests until its next try."""


class ClusterBusy(ClusterUnavailable):
    """Another worker is waiting on the cluster for an answer that does not come
    (fleet.kube.inflight): this request was not sent, or gave up early, so that one worker at
    most waits on it. Treated like an open breaker; it does not open one."""


class ClusterHealth:
    """One cluster's breaker and contact record, shared by the threads of one process."""

    def __init__(self, cluster_id: int | None, name: str):
        self.cluster_id = cluster_id
        self.name = name
        self.failures = 0
        self.open_until = 0.0  # time.monotonic(); 0 when closed
        self.last_error = ""
        self.latency_ms: float | None = None
        self._written_at = 0.0
        self._lock = threading.Lock()

    def check(self) -> None:
        """Raise ClusterUnavailable while the breaker is open."""
        with self._lock:
            wait = self.open_until - time.monotonic()
            if self.open_until and wait > 0:
                raise ClusterUnavailable(
                    f"cluster {self.name} is not answering ({self.last_error}); "
                    f"next try in {wait:.0f} s",
                    reason="Unreachable",
                )

    def is_open(self) -> bool:
        with self._lock:
            return bool(self.open_until) and self.open_until > time.monotonic()

    def allow_probe(self) -> None:
        """This process won the cluster's next try (fleet.services.cluster_health): let one
        request through even if the local window has not run out."""
        with self._lock:
            self.open_until = 0.0
            # Known down (by another process, maybe): an answer now is a recovery to record.
            self.failures = max(self.failures, 1)

    def succeeded(self, seconds: float) -> None:
        ms = seconds * 1000.0
        with self._lock:
            recovered = self.failures > 0
            self.failures = 0
            self.open_until = 0.0
            # A moving average, so one slow list does not paint the cluster slow.
            self.latency_ms = ms if self.latency_ms is None else 0.7 * self.latency_ms + 0.3 * ms
            due = recovered or time.monotonic() - self._written_at >= CONTACT_WRITE_SECONDS
            if due:
                self._written_at = time.monotonic()
            latency = round(self.latency_ms)
        if due:
            self._write(
                last_contact_at=timezone.now(), api_latency_ms=latency, unreachable_since=None,
                retry_at=None,
            )  # fmt: skip
            if recovered:
                log.info("cluster %s answers again", self.name)

    def failed(self, exc: TransientError, *, unreachable: bool) -> None:
        """Record an error; one that did not reach the API server opens the breaker."""
        now = timezone.now()
        text = exc.describe()[:2000]
        if not unreachable:
            with self._lock:
                due = time.monotonic() - self._written_at >= CONTACT_WRITE_SECONDS / 3
                if due:
                    self._written_at = time.monotonic()
            if due:
                self._write(last_error=text, last_error_at=now)
            return
        with self._lock:
            self.failures += 1
            self.last_error = exc.message[:300]
            self._written_at = time.monotonic()
        # The window grows with how long the cluster has been down, as every process saw it:
        # half of that, from 5 s up to 5 min.
        down_for = self._down_for(now)
        window = min(BREAKER_MAX_SECONDS, max(BREAKER_FIRST_SECONDS, down_for / 2))
        with self._lock:
            self.open_until = time.monotonic() + window
        log.warning("cluster %s unreachable, next try in %.0f s: %s", self.name, window, text)
        self._write(
            last_error=text,
            last_error_at=now,
            unreachable_since=Coalesce("unreachable_since", now),
            retry_at=now + timedelta(seconds=window),
        )

    def _down_for(self, now) -> float:
        if self.cluster_id is None:
            return 0.0
        from fleet.models import Cluster

        try:
            since = (
                Cluster.objects.filter(pk=self.cluster_id)
                .values_list("unreachable_since", flat=True)
                .first()
            )
        except (DatabaseError, TransactionManagementError):
            return 0.0
        return (now - since).total_seconds() if since else 0.0

    def _write(self, **fields) -> None:
        if self.cluster_id is None:
            return
        from fleet.models import Cluster

        try:
            Cluster.objects.filter(pk=self.cluster_id).update(**fields)
        except (
            DatabaseError,
            TransactionManagementError,
        ) as exc:  # health is advisory; never fail the request for it
            log.warning("could not record the health of cluster %s: %s", self.name, exc)
