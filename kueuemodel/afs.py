"""Kueue's admission fair sharing (KEP-4136): within a ClusterQueue whose admissionScope says
`UsageBasedAdmissionFairSharing`, pending workloads go in the order of their LocalQueue's usage
memory, lowest first, and then by priority and age as usual.

Each LocalQueue remembers what it consumed: every sampling interval its consumed resources move
toward what its admitted workloads hold now, by alpha = 1 - 0.5 ^ (elapsed / half-life), so the
past decays with the half-life. Each admission adds an entry penalty at once (alpha of one
sampling interval times what the workload requests), so a burst from one queue cannot take
everything before the next sample. A queue's usage is the sum over resources of its consumed
amount (in the resource's quantity: cores, bytes, GPUs) times the resource's weight (1 unless
configured), divided by the LocalQueue's `spec.fairSharing.weight` (a zero weight: last).

The configuration is Kueue's `admissionFairSharing` section as JSON, e.g.
`{"usageHalfLifeTime": "168h", "usageSamplingInterval": "5m", "resourceWeights": {"cpu": 0}}`.
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from dataclasses import dataclass, field

from kueuemodel.resources import parse_quantity

ADMISSION_MODE = "UsageBasedAdmissionFairSharing"
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str | int | float) -> float:
    """A Go duration ("168h", "5m", "1h30m", "500ms") in seconds."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        return float(text)
    text = str(text).strip()
    if text == "0":
        return 0.0
    pos, total = 0, 0.0
    for match in _DURATION.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _SECONDS[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise ValueError(f"invalid duration {text!r}")
    return total


@dataclass(frozen=True)
class AfsConfig:
    """Kueue's `admissionFairSharing` configuration."""

    half_life: float  # usageHalfLifeTime, seconds (0: no memory)
    sampling: float  # usageSamplingInterval, seconds
    weights: dict[str, float] = field(default_factory=dict)  # resourceWeights (others: 1)

    @classmethod
    def from_text(cls, text: str | None) -> AfsConfig | None:
        """The configuration from its JSON text; None for an empty one (AFS off)."""
        if not text or not str(text).strip():
            return None
        raw = json.loads(text)
        return cls(
            half_life=parse_duration(raw.get("usageHalfLifeTime", "168h")),
            sampling=parse_duration(raw.get("usageSamplingInterval", "5m")),
            weights={str(k): float(v) for k, v in (raw.get("resourceWeights") or {}).items()},
        )

    def alpha(self, elapsed: float) -> float:
        """How far one sample moves consumed usage toward current usage after `elapsed`."""
        if self.half_life <= 0:
            return 1.0  # no memory: consumed is what is held now
        return 1.0 - math.pow(0.5, max(0.0, elapsed) / self.half_life)


def quantity(resource: str, units: int | float) -> float:
    """kubesim's integer units (millicores for cpu) as the resource's quantity."""
    return units / 1000 if resource == "cpu" else float(units)


def quantity_text(value: float) -> str:
    """A consumed amount as a Kubernetes quantity ("3", "2500m")."""
    milli = round(value * 1000)
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


class UsageLedger:
    """Per LocalQueue (namespace, name): its consumed resources and when they were last
    sampled, and what its admitted workloads hold now."""

    def __init__(self, config: AfsConfig):
        self.config = config
        self.consumed: dict[tuple[str, str], dict[str, float]] = {}
        self.updated: dict[tuple[str, str], float] = {}
        self.held: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.last_sample: float | None = None

    @staticmethod
    def _by_resource(usage: dict[tuple[str, str], int]) -> dict[str, float]:
        out: dict[str, float] = defaultdict(float)
        for (_, res), units in usage.items():
            out[res] += quantity(res, units)
        return out

    def hold(self, key: tuple[str, str], usage: dict[tuple[str, str], int], sign: int) -> None:
        """An admission (+1) or release (-1) of `usage` ((flavor, resource) -> units)."""
        held = self.held[key]
        for res, amount in self._by_resource(usage).items():
            held[res] = max(0.0, held[res] + sign * amount)

    def penalize(self, key: tuple[str, str], usage: dict[tuple[str, str], int], now: float) -> None:
        """The entry penalty of an admission: what one sampling interval of it would add."""
        alpha = self.config.alpha(self.config.sampling)
        consumed = self.consumed.setdefault(key, {})
        self.updated.setdefault(key, now)
        for res, amount in self._by_resource(usage).items():
            consumed[res] = consumed.get(res, 0.0) + alpha * amount

    def seed(self, key: tuple[str, str], status: dict, now: float, parse_time) -> None:
        """Take a LocalQueue's recorded usage (a restarted Kueue keeps its memory)."""
        if key in self.consumed:
            return
        afs = ((status or {}).get("fairSharing") or {}).get("admissionFairSharingStatus") or {}
        consumed = {}
        for res, value in (afs.get("consumedResources") or {}).items():
            try:
                consumed[res] = float(parse_quantity(value))
            except ValueError:
                continue
        self.consumed[key] = consumed
        updated = parse_time(afs["lastUpdate"]) if afs.get("lastUpdate") else None
        self.updated[key] = now if updated is None else min(updated, now)

    def due(self, now: float) -> bool:
        return self.last_sample is None or now - self.last_sample >= self.config.sampling

    def sample(self, keys, now: float) -> list[tuple[str, str]]:
        """Move each queue's consumed usage toward what it holds now; the queues it changed."""
        self.last_sample = now
        changed = []
        for key in keys:
            last = self.updated.get(key)
            if last is None:
                self.updated[key] = now
                self.consumed.setdefault(key, {})
                continue
            alpha = self.config.alpha(now - last)
            consumed = self.consumed.setdefault(key, {})
            held = self.held.get(key) or {}
            for res in set(consumed) | set(held):
                consumed[res] = (1 - alpha) * consumed.get(res, 0.0) + alpha * held.get(res, 0.0)
            self.updated[key] = now
            changed.append(key)
        return changed

    def usage(self, key: tuple[str, str], weight: float) -> float:
        """The queue's weighted usage, by which admission orders it (lowest first)."""
        if weight <= 0:
            return math.inf
        consumed = self.consumed.get(key) or {}
        total = sum(self.config.weights.get(res, 1.0) * value for res, value in consumed.items())
        return total / weight

    def forget(self, key: tuple[str, str]) -> None:
        for table in (self.consumed, self.updated, self.held):
            table.pop(key, None)

    def status(self, key: tuple[str, str], format_time) -> dict:
        """The LocalQueue's `status.fairSharing.admissionFairSharingStatus`."""
        consumed = self.consumed.get(key) or {}
        return {
            "consumedResources": {res: quantity_text(v) for res, v in sorted(consumed.items())},
            "lastUpdate": format_time(self.updated.get(key) or self.last_sample or 0.0),
        }
