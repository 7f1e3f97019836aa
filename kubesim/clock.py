"""Simulation clock: UTC wall time, optionally running faster than real time."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta


class Clock:
    """A clock whose simulated time advances `time_scale` times faster than real time."""

    def __init__(self, time_scale: float = 1.0, start: datetime | None = None):
        if time_scale <= 0:
            raise ValueError("time_scale must be positive")
        self.time_scale = float(time_scale)
        self._lock = threading.Lock()
        self._origin_sim = start or datetime.now(UTC)
        self._origin_mono = time.monotonic()
        self._offset = 0.0  # seconds added by advance(), for tests

    def now(self) -> datetime:
        """Current simulated time (UTC, timezone-aware)."""
        with self._lock:
            elapsed = (time.monotonic() - self._origin_mono) * self.time_scale + self._offset
        return self._origin_sim + timedelta(seconds=elapsed)

    def timestamp(self) -> float:
        """Current simulated time as a POSIX timestamp."""
        return self.now().timestamp()

    def advance(self, seconds: float) -> None:
        """Jump the simulated time forward (tests, benchmarks)."""
        with self._lock:
            self._offset += seconds

    def restart(self, start: datetime | None = None) -> None:
        """Start over from `start` (default: now) with nothing advanced, as a new clock would
        (a kubesim shared by tests is reset this way between them)."""
        with self._lock:
            self._origin_sim = start or datetime.now(UTC)
            self._origin_mono = time.monotonic()
            self._offset = 0.0

    def rescale(self, time_scale: float) -> None:
        """Run `time_scale` times faster than real time from now on (tests)."""
        if time_scale <= 0:
            raise ValueError("time_scale must be positive")
        with self._lock:
            now = time.monotonic()
            elapsed = (now - self._origin_mono) * self.time_scale + self._offset
            self._origin_sim += timedelta(seconds=elapsed)
            self._origin_mono = now
            self._offset = 0.0
            self.time_scale = float(time_scale)

    def real_seconds(self, sim_seconds: float) -> float:
        """How long `sim_seconds` of simulated time take in real time."""
        return max(0.0, sim_seconds) / self.time_scale


def parse_time(value: str | None) -> datetime | None:
    """Parse a Kubernetes timestamp; None when absent or unparsable."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
