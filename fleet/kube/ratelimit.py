"""Client-side rate limits (the official Python client has none): a token bucket per process,
and a window per cluster that all of the portal's processes share."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from limits import RateLimitItem, RateLimitItemPerSecond
from limits.storage import storage_from_string
from limits.strategies import MovingWindowRateLimiter

log = logging.getLogger(__name__)


class TokenBucket:
    """A thread-safe token bucket; rate and burst are read on every call (settings may change)."""

    def __init__(
        self,
        rate: Callable[[], float],
        burst: Callable[[], int],
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self._rate = rate
        self._burst = burst
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._tokens: float | None = None
        self._stamp = clock()

    def acquire(self) -> float:
        """Take one token, sleeping until one is available; returns the seconds waited."""
        waited = 0.0
        while True:
            with self._lock:
                rate, burst = float(self._rate()), max(1, int(self._burst()))
                if rate <= 0:
                    return waited
                now = self._clock()
                tokens = burst if self._tokens is None else self._tokens
                tokens = min(burst, tokens + (now - self._stamp) * rate)
                self._stamp = now
                if tokens >= 1:
                    self._tokens = tokens - 1
                    return waited
                self._tokens = tokens
                delay = (1 - tokens) / rate
            # Sleep outside the lock so other threads can refill and check too.
            self._sleep(delay)
            waited += delay


class SharedRateLimit:
    """KUBE_QPS for one cluster across all of the portal's processes, not per process: more
    worker processes do not multiply what the cluster receives. The `limits` library keeps a
    moving window in Redis: at most QPS x W requests in any W seconds, W being BURST/QPS
    rounded to a whole second (its finest window; 2 s for the defaults, 50 and 100).

    Each process keeps its own TokenBucket in front of it, which smooths its bursts as before.
    Where the storage cannot be reached, that bucket alone holds the line (logged once a
    minute): a stopped Redis costs the shared limit, never the cluster's work."""

    WARN_EVERY = 60.0

    def __init__(
        self,
        key: str,
        url: str,
        local: TokenBucket,
        rate: Callable[[], float],
        burst: Callable[[], int],
        *,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.key = key
        self.url = url
        self.local = local
        self._rate = rate
        self._burst = burst
        self._sleep = sleep
        self._warned_at = 0.0

    def window(self) -> RateLimitItem | None:
        """The moving window for the current settings; None when unlimited."""
        rate, burst = float(self._rate()), max(1, int(self._burst()))
        if rate <= 0:
            return None
        seconds = max(1, round(burst / rate))
        return RateLimitItemPerSecond(max(1, round(rate * seconds)), seconds)

    def try_acquire(self) -> float | None:
        """Take one request of the shared window: None when taken (or nothing limits), else
        the seconds until the window has room. Raises what the storage raises."""
        item = self.window()
        if item is None:
            return None
        limiter = _limiter(self.url)
        if limiter.hit(item, self.key):
            return None
        stats = limiter.get_window_stats(item, self.key)
        return min(float(item.get_expiry()), max(0.005, stats.reset_time - time.time()))

    def acquire(self) -> float:
        """Take one token of the process's bucket, then one of the shared window, sleeping
        until each has room; returns the seconds waited."""
        waited = self.local.acquire()
        while True:
            try:
                delay = self.try_acquire()
            except Exception as exc:  # noqa: BLE001 - any storage failure: the local bucket rules
                self._warn(exc)
                return waited
            if delay is None:
                return waited
            self._sleep(delay)
            waited += delay

    def _warn(self, exc: Exception) -> None:
        now = time.monotonic()
        if now - self._warned_at >= self.WARN_EVERY or not self._warned_at:
            self._warned_at = now
            log.warning(
                "the shared Kubernetes rate limit (%s) cannot be reached (%s); each process "
                "limits its own requests until it can",
                self.key,
                exc,
            )


_limiters: dict[str, MovingWindowRateLimiter] = {}
_limiters_lock = threading.Lock()


def _limiter(url: str) -> MovingWindowRateLimiter:
    """One limiter (and Redis connection pool) per storage URL and process. Short socket
    timeouts: a Redis that stopped answering delays a request by half a second, not forever."""
    with _limiters_lock:
        found = _limiters.get(url)
        if found is None:
            storage = storage_from_string(
                url, socket_timeout=0.5, socket_connect_timeout=0.5, key_prefix="qm-kube-rate"
            )
            found = _limiters[url] = MovingWindowRateLimiter(storage)
        return found
