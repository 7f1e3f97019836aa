"""Kubernetes resource quantities ("500m", "4", "16Gi") to the whole units the portal stores
(millicores, MiB) and back. Parsing is the official client's; only the units are ours."""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal

from kubernetes.utils import parse_quantity

MIB = 1024 * 1024


def _quantity(value) -> Decimal | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        amount = parse_quantity(value if isinstance(value, int | float) else str(value).strip())
    except (ValueError, TypeError, ArithmeticError):
        return None
    if not amount.is_finite() or amount < 0:
        return None
    return amount


def quantity_float(value) -> float | None:
    """A quantity as a number ("2500m" → 2.5, "3" → 3.0); None if invalid."""
    amount = _quantity(value)
    return None if amount is None else float(amount)


def cpu_millis(value) -> int | None:
    """Millicores of a CPU quantity ("500m" → 500, "4" → 4000, 2.5 → 2500); None if invalid.
    Rounded up, as the API server does for precision finer than a millicore."""
    amount = _quantity(value)
    return None if amount is None else math.ceil(amount * 1000)


def memory_mib(value) -> int | None:
    """MiB of a memory quantity ("16Gi" → 16384, "512Mi" → 512, "1G" → 954); None if invalid.
    A bare number is bytes, as in Kubernetes; rounded up to whole MiB."""
    amount = _quantity(value)
    return None if amount is None else math.ceil(amount / MIB)


def cpu_text(millis: int) -> str:
    """A CPU quantity for a manifest or a page: 4000 → "4", 1500 → "1500m"."""
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def memory_text(mib: int) -> str:
    """A memory quantity for a manifest or a page: 16384 → "16Gi", 1536 → "1536Mi"."""
    return f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi"


# What a worker gets per GPU in a pool whose nodes are not known yet, and what a worker without
# GPUs gets; a pool's own figures come from its nodes or from its settings.
DEFAULT_CPU_PER_GPU_MILLIS = 4000
DEFAULT_MEMORY_PER_GPU_MIB = 16 * 1024
CPU_ONLY_WORKER_MILLIS = 1000
CPU_ONLY_WORKER_MIB = 2 * 1024


@dataclass(frozen=True)
class WorkerSize:
    """A pool's CPU and memory per GPU (a worker's default share) and the most one worker can
    have (the largest node's allocatable; None while no node is known)."""

    cpu_per_gpu_millis: int
    memory_per_gpu_mib: int
    max_cpu_millis: int | None
    max_memory_mib: int | None

    def default_cpu(self, gpus: int) -> int:
        return gpus * self.cpu_per_gpu_millis if gpus else CPU_ONLY_WORKER_MILLIS

    def default_memory(self, gpus: int) -> int:
        return gpus * self.memory_per_gpu_mib if gpus else CPU_ONLY_WORKER_MIB


DEFAULT_WORKER_SIZE = WorkerSize(DEFAULT_CPU_PER_GPU_MILLIS, DEFAULT_MEMORY_PER_GPU_MIB, None, None)
