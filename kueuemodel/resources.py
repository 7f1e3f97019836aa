"""Kubernetes quantities as Kueue counts them: a resource's amount as an integer (millicores for
cpu, whole units rounded up otherwise), and what one pod requests."""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation
from typing import Any

GPU = "nvidia.com/gpu"

_SUFFIXES = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
}
_QTY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")


def parse_quantity(value: Any) -> Decimal:
    """Parse a Kubernetes quantity ("500m", "4Gi", 8) into a Decimal."""
    if isinstance(value, bool):
        raise ValueError(f"invalid quantity {value!r}")
    if isinstance(value, int | float | Decimal):
        return Decimal(str(value))
    match = _QTY.match(str(value).strip())
    if not match:
        raise ValueError(f"invalid quantity {value!r}")
    number, suffix = match.groups()
    if suffix and suffix not in _SUFFIXES:
        raise ValueError(f"invalid quantity suffix in {value!r}")
    try:
        return Decimal(number) * Decimal(_SUFFIXES.get(suffix, 1))
    except InvalidOperation as exc:
        raise ValueError(f"invalid quantity {value!r}") from exc


def to_units(resource: str, value: Any) -> int:
    """Integer amount of a resource: millicores for cpu, whole units (rounded up) otherwise."""
    qty = parse_quantity(value)
    if resource == "cpu":
        return math.ceil(qty * 1000)
    return math.ceil(qty)


def format_units(resource: str, units: int) -> str:
    """Inverse of to_units, as a canonical quantity string."""
    if resource == "cpu":
        return str(units // 1000) if units % 1000 == 0 else f"{units}m"
    if resource == "memory" or resource.startswith("ephemeral-storage"):
        for suffix, factor in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if units and units % factor == 0:
                return f"{units // factor}{suffix}"
    return str(units)


def pod_requests(pod_spec: dict) -> dict[str, int]:
    """Effective resource requests of one pod (sum of containers, max with init containers)."""
    total: dict[str, int] = {}
    for container in pod_spec.get("containers") or []:
        for name, units in _container_requests(container).items():
            total[name] = total.get(name, 0) + units
    for container in pod_spec.get("initContainers") or []:
        for name, units in _container_requests(container).items():
            total[name] = max(total.get(name, 0), units)
    for name, value in (pod_spec.get("overhead") or {}).items():
        total[name] = total.get(name, 0) + to_units(name, value)
    return {name: units for name, units in total.items() if units}


def _container_requests(container: dict) -> dict[str, int]:
    resources = container.get("resources") or {}
    # Requests default to limits when only limits are given (always the case for extended ones).
    merged = dict(resources.get("limits") or {})
    merged.update(resources.get("requests") or {})
    out = {}
    for name, value in merged.items():
        try:
            out[name] = to_units(name, value)
        except ValueError:
            continue
    return out
