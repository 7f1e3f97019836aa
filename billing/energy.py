"""Energy and carbon arithmetic, pure: GPU energy measured by DCGM, the facility energy it
stands for (× the site's PUE) and its CO2e (× the grid's carbon intensity), as figures.

GPU energy is measured (DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, per GPU-hour); facility energy
and CO2e are estimates: the PUE is one site-wide ratio and the carbon intensity is the hour's
uploaded value, else the site's constant. An hour whose GPU gave no energy reading is counted
as "not measured" and adds nothing: never 0 kWh.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal

from billing.pricing import gpu_hours

JOULES_PER_KWH = Decimal(3_600_000)
KWH_QUANTUM = Decimal("0.001")
KG_QUANTUM = Decimal("0.001")


def kwh(joules) -> Decimal:
    """kWh from joules, to the watt-hour."""
    return (Decimal(str(joules)) / JOULES_PER_KWH).quantize(KWH_QUANTUM, ROUND_HALF_EVEN)


@dataclass
class EnergySums:
    """Running sums of some GPU-hours: measured joules, joules × the hour's intensity (gCO2e/kWh),
    joules in hours that have no intensity, and GPU-seconds held without an energy reading."""

    joules: float = 0.0
    measured_rows: int = 0
    weighted: float = 0.0
    joules_without_intensity: float = 0.0
    seconds_not_measured: int = 0

    def add(self, other: EnergySums) -> None:
        self.joules += other.joules
        self.measured_rows += other.measured_rows
        self.weighted += other.weighted
        self.joules_without_intensity += other.joules_without_intensity
        self.seconds_not_measured += other.seconds_not_measured


def energy_figures(sums: EnergySums, *, pue: Decimal) -> dict:
    """What the pages, the API and the exports show for some GPU-hours.

    gpu_energy_kwh: measured; None when no hour was measured. facility_energy_kwh: the GPU
    energy × PUE (estimate). co2e_kg: Σ (GPU kWh × PUE × the hour's gCO2e/kWh) / 1000
    (estimate); None when some measured energy fell in hours with no carbon intensity.
    gpu_hours_not_measured: GPU-hours held without an energy reading (not in the kWh).
    """
    pue = Decimal(str(pue))
    measured = sums.measured_rows > 0
    gpu_kwh = Decimal(str(sums.joules)) / JOULES_PER_KWH
    co2e = None
    if measured and sums.joules_without_intensity <= 0:
        grams = Decimal(str(sums.weighted)) / JOULES_PER_KWH * pue
        co2e = (grams / 1000).quantize(KG_QUANTUM, ROUND_HALF_EVEN)
    return {
        "gpu_energy_kwh": str(gpu_kwh.quantize(KWH_QUANTUM, ROUND_HALF_EVEN)) if measured else None,
        "facility_energy_kwh": (
            str((gpu_kwh * pue).quantize(KWH_QUANTUM, ROUND_HALF_EVEN)) if measured else None
        ),
        "co2e_kg": None if co2e is None else str(co2e),
        "gpu_hours_not_measured": str(gpu_hours(sums.seconds_not_measured)),
        "pue": str(pue),
        "estimate": "facility energy and CO2e are estimates (PUE, grid carbon intensity)",
    }


def add_figures(items: list[dict | None], *, pue: Decimal | str | None = None) -> dict | None:
    """The sum of some figures as energy_figures gives them (a closed month's frozen rows):
    kWh and CO2e add up; CO2e is None when any part with energy has none."""
    items = [i for i in items if i]
    if not items:
        return None

    def total(key):
        return sum((Decimal(i[key]) for i in items if i.get(key) is not None), Decimal(0))

    measured = any(i.get("gpu_energy_kwh") is not None for i in items)
    co2e_known = all(
        i.get("co2e_kg") is not None for i in items if i.get("gpu_energy_kwh") is not None
    )
    return {
        "gpu_energy_kwh": str(total("gpu_energy_kwh")) if measured else None,
        "facility_energy_kwh": str(total("facility_energy_kwh")) if measured else None,
        "co2e_kg": str(total("co2e_kg")) if measured and co2e_known else None,
        "gpu_hours_not_measured": str(total("gpu_hours_not_measured")),
        "pue": str(pue if pue is not None else items[0].get("pue", "")),
        "estimate": items[0].get("estimate", ""),
    }
