"""Pure pricing: GPU seconds × the price in force at each hour, per billing basis. No I/O.

Money is Decimal; GPU time is integer seconds; a price applies to the hours starting inside
its half-open period [effective_from, effective_to). Costs are carried with six decimals and
rounded to cents only for display and export, so totals equal the sum of their lines.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from datetime import datetime
from decimal import ROUND_HALF_EVEN, Decimal

SECONDS_PER_HOUR = Decimal(3600)
COST_QUANTUM = Decimal("0.000001")
CENT = Decimal("0.01")
HOURS_QUANTUM = Decimal("0.0001")

BASIS_ALLOCATED = "allocated"
BASIS_USED = "used"
BASIS_BLEND = "blend"


def gpu_hours(seconds: int | Decimal) -> Decimal:
    """GPU-hours from GPU-seconds, to four decimals."""
    return (Decimal(seconds) / SECONDS_PER_HOUR).quantize(HOURS_QUANTUM, ROUND_HALF_EVEN)


def cost_of(seconds: int | Decimal, price_per_hour: Decimal) -> Decimal:
    """The cost of `seconds` GPU-seconds at `price_per_hour`, to six decimals."""
    return (Decimal(price_per_hour) * Decimal(seconds) / SECONDS_PER_HOUR).quantize(
        COST_QUANTUM, ROUND_HALF_EVEN
    )


def cents(amount: Decimal) -> Decimal:
    return Decimal(amount).quantize(CENT, ROUND_HALF_EVEN)


def billable_seconds(
    *,
    allocated: int,
    used: int,
    basis: str = BASIS_ALLOCATED,
    blend_weight: Decimal = Decimal("0.5"),
) -> Decimal:
    """Seconds charged under a team's basis: allocated, used, or w × allocated + (1 − w) × used."""
    if basis == BASIS_USED:
        return Decimal(used)
    if basis == BASIS_BLEND:
        w = Decimal(blend_weight)
        return w * Decimal(allocated) + (1 - w) * Decimal(used)
    return Decimal(allocated)


@dataclass(frozen=True)
class Price:
    """One price-book row, detached from the database."""

    id: int
    gpu_model_id: int
    mig_profile: str
    price_per_hour: Decimal
    currency: str
    effective_from: datetime
    effective_to: datetime | None


class PriceBook:
    """Price rows indexed for lookups of the price in force at an hour."""

    def __init__(self, prices):
        self.by_id: dict[int, Price] = {}
        self._index: dict[tuple[int, str], tuple[list[datetime], list[Price]]] = {}
        grouped: dict[tuple[int, str], list[Price]] = {}
        for p in prices:
            price = p if isinstance(p, Price) else Price(
                p.pk, p.gpu_model_id, p.mig_profile, p.price_per_hour, p.currency,
                p.effective_from, p.effective_to,
            )  # fmt: skip
            self.by_id[price.id] = price
            grouped.setdefault((price.gpu_model_id, price.mig_profile), []).append(price)
        for key, rows in grouped.items():
            rows.sort(key=lambda r: r.effective_from)
            self._index[key] = ([r.effective_from for r in rows], rows)

    def __iter__(self):
        return iter(self.by_id.values())

    def at(self, gpu_model_id: int | None, mig_profile: str, hour: datetime) -> Price | None:
        """The price in force at `hour` (its start), or None."""
        entry = self._index.get((gpu_model_id, mig_profile))
        if entry is None:
            return None
        starts, rows = entry
        i = bisect_right(starts, hour) - 1
        if i < 0:
            return None
        row = rows[i]
        if row.effective_to is not None and hour >= row.effective_to:
            return None
        return row


def percentile(values: list[float], q: float) -> float | None:
    """The q-quantile (0–1) by linear interpolation; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)
