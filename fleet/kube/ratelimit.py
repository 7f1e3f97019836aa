"""A client-side token bucket (the official Python client has none)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


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
