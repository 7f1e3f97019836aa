"""What the API server does to a pod, a ResourceQuota and a LimitRange when it stores them,
besides ResourceQuota's admission (kubesim/quota.py):

- quantities are written in their canonical form ("2000m" -> "2", "1024Mi" -> "1Gi",
  "1000" -> "1k"), as the Quantity type serialises itself;
- a container's requests default to its limits (the pod's API defaulting);
- the LimitRanger admission plugin writes a namespace's LimitRange defaults into the containers
  that lack them (and says so in the `kubernetes.io/limit-ranger` annotation), and refuses a
  container outside the LimitRange's min and max with 403 Forbidden;
- a LimitRange's Container item is defaulted: `default` from `max`, `defaultRequest` from
  `default` (then `max`).
"""

from __future__ import annotations

import re
from decimal import Decimal

from kubesim import resources
from kueuemodel.resources import parse_quantity

LIMIT_RANGER_ANNOTATION = "kubernetes.io/limit-ranger"
_BINARY = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
_DECIMAL = (("E", 18), ("P", 15), ("T", 12), ("G", 9), ("M", 6), ("k", 3), ("", 0), ("m", -3),
            ("u", -6), ("n", -9))  # fmt: skip
_BINARY_SUFFIX = re.compile(r"[KMGTPE]i$")


def canonical(value) -> str:
    """A quantity as the API server writes it back: in the format it was given in (binary or
    decimal SI), with the largest suffix that keeps the number whole."""
    text = str(value).strip()
    try:
        amount = parse_quantity(text)
    except ValueError:
        return text
    if "e" in text.lower() and not text[-1].isalpha():
        return text  # the decimal-exponent form is kept as written
    if _BINARY_SUFFIX.search(text) and amount == amount.to_integral_value() and abs(amount) >= 1024:
        whole = int(amount)
        power = 0
        while power < len(_BINARY) - 1 and whole % (1024 ** (power + 1)) == 0:
            power += 1
        return f"{whole // 1024**power}{_BINARY[power]}"
    # Decimal SI, rounded up to a whole number of nano units as the API server does.
    nanos = (amount * Decimal(10) ** 9).to_integral_value(rounding="ROUND_CEILING")
    if nanos == 0:
        return "0"
    for suffix, exponent in _DECIMAL:
        unit = Decimal(10) ** (exponent + 9)
        if nanos % unit == 0:
            return f"{int(nanos // unit)}{suffix}"
    return text


def _canonical_map(mapping: dict | None) -> dict | None:
    if not isinstance(mapping, dict):
        return mapping
    return {key: canonical(value) for key, value in mapping.items()}


def _containers(spec: dict) -> list[dict]:
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]


def default_pod(pod: dict) -> None:
    """The pod's API defaulting: canonical quantities, requests from limits."""
    for container in _containers(pod.get("spec") or {}):
        res = container.get("resources")
        if not isinstance(res, dict):
            continue
        for key in ("limits", "requests"):
            if res.get(key):
                res[key] = _canonical_map(res[key])
        for name, limit in (res.get("limits") or {}).items():
            res.setdefault("requests", {}).setdefault(name, limit)


def default_quota(quota: dict) -> None:
    spec = quota.get("spec") or {}
    if spec.get("hard"):
        spec["hard"] = _canonical_map(spec["hard"])


def default_limit_range(limit_range: dict) -> None:
    for item in (limit_range.get("spec") or {}).get("limits") or []:
        for key in ("max", "min", "default", "defaultRequest", "maxLimitRequestRatio"):
            if item.get(key):
                item[key] = _canonical_map(item[key])
        if item.get("type") != "Container":
            continue
        for name, value in (item.get("max") or {}).items():
            item.setdefault("default", {}).setdefault(name, value)
        for name, value in (item.get("default") or {}).items():
            item.setdefault("defaultRequest", {}).setdefault(name, value)


def limit_range_problem(store, pod: dict) -> str:
    """Apply the namespace's LimitRanges to a new pod: write their defaults into it, and say why
    it is refused ("" when it is not)."""
    namespace = pod["metadata"].get("namespace") or "default"
    items = [
        item
        for lr in store.list(resources.LIMIT_RANGES, copy=False)
        if lr["metadata"].get("namespace") == namespace
        for item in (lr.get("spec") or {}).get("limits") or []
        if item.get("type") == "Container"
    ]
    if not items:
        return ""
    notes: list[str] = []
    for container in _containers(pod.get("spec") or {}):
        res = container.setdefault("resources", {})
        set_requests, set_limits = [], []
        for item in items:
            for name, value in (item.get("default") or {}).items():
                if name not in (res.get("limits") or {}):
                    res.setdefault("limits", {})[name] = value
                    set_limits.append(name)
            for name, value in (item.get("defaultRequest") or {}).items():
                if name not in (res.get("requests") or {}):
                    res.setdefault("requests", {})[name] = value
                    set_requests.append(name)
        who = f"for container {container.get('name', '')}"
        if set_requests:
            notes.append(f"{', '.join(sorted(set_requests))} request {who}")
        if set_limits:
            notes.append(f"{', '.join(sorted(set_limits))} limit {who}")
    if notes:
        annotations = pod["metadata"].setdefault("annotations", {})
        annotations[LIMIT_RANGER_ANNOTATION] = "LimitRanger plugin set: " + "; ".join(notes)
    errors = []
    for container in _containers(pod.get("spec") or {}):
        res = container.get("resources") or {}
        requests, limits = res.get("requests") or {}, res.get("limits") or {}
        for item in items:
            for name, bound in (item.get("min") or {}).items():
                floor = parse_quantity(bound)
                if name not in requests:
                    errors.append(f"minimum {name} usage per Container is {bound}.  No request "
                                  "is specified")  # fmt: skip
                elif parse_quantity(requests[name]) < floor:
                    errors.append(f"minimum {name} usage per Container is {bound}, but request "
                                  f"is {requests[name]}")  # fmt: skip
                elif name in limits and parse_quantity(limits[name]) < floor:
                    errors.append(f"minimum {name} usage per Container is {bound}, but limit "
                                  f"is {limits[name]}")  # fmt: skip
            for name, bound in (item.get("max") or {}).items():
                ceiling = parse_quantity(bound)
                if name not in limits:
                    errors.append(f"maximum {name} usage per Container is {bound}.  No limit "
                                  "is specified")  # fmt: skip
                elif parse_quantity(limits[name]) > ceiling:
                    errors.append(f"maximum {name} usage per Container is {bound}, but limit "
                                  f"is {limits[name]}")  # fmt: skip
                elif name in requests and parse_quantity(requests[name]) > ceiling:
                    errors.append(f"maximum {name} usage per Container is {bound}, but request "
                                  f"is {requests[name]}")  # fmt: skip
    if not errors:
        return ""
    name = pod["metadata"].get("name", "")
    joined = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
    return f'pods "{name}" is forbidden: {joined}'
