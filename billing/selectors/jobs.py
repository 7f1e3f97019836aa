"""One job's measured use, from the DCGM samples billing ingests: GPU utilisation and memory
over time, GPU-hours held and used, cost so far (with the prices used, on the team's basis),
queue wait, and whether it holds GPUs it barely uses."""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta
from decimal import Decimal

from billing.dcgm import HOUR
from billing.energy import EnergySums, energy_figures
from billing.models import EnergySettings, UsageHour
from billing.pricing import PriceBook, billable_seconds, cents, cost_of, gpu_hours
from billing.selectors.energy import energy_sums
from billing.selectors.prices import price_book_for
from billing.selectors.usage import policies_by_team
from fleet.models import GpuModel
from queues.models import Job

# Held for at least this long at under this mean utilisation: the page says the GPUs sit idle.
LOW_UTIL_PERCENT = 5.0
LOW_UTIL_AFTER_SECONDS = 1800
# A job that spans at most this many hours is charted by the 5 minutes, where the scrape
# kept them (an hour's single point draws no line).
FINE_CHART_HOURS = 3


def job_usage(*, job: Job) -> dict:
    rows = list(
        UsageHour.objects.filter(job=job)
        .order_by("hour", "gpu_uuid")
        .values_list(
            "hour", "gpu_uuid", "gpu_model_id", "mig_profile", "seconds_allocated", "seconds_busy",
            "util_mean", "memory_used_mib_mean", "memory_used_mib_max", "util_buckets",
        )
    )  # fmt: skip
    basis, weight = policies_by_team([job.team_id]).get(job.team_id, ("allocated", Decimal("0.5")))
    held = used = 0
    cost = Decimal(0)
    book = price_book_for(start=rows[0][0], end=rows[-1][0] + HOUR) if rows else PriceBook([])
    used_prices: set = set()
    series: dict = defaultdict(lambda: [0, 0.0, 0.0, 0])  # hour -> [seconds, util·s, mem·s, max]
    gpus = set()
    fine: dict = defaultdict(lambda: [0.0, 0])  # bucket start -> [utilisation sum, samples]
    for hour, uuid, model_id, mig, allocated, busy, util, memory, memory_max, buckets in rows:
        for minute, (total, samples) in (buckets or {}).items():
            point = fine[hour + timedelta(minutes=int(minute))]
            point[0] += total
            point[1] += samples
        gpus.add(uuid)
        held += allocated
        used += busy
        price = book.at(model_id, mig, hour)
        if price is not None:
            used_prices.add(price)
            seconds = billable_seconds(allocated=allocated, used=busy, basis=basis,
                                       blend_weight=weight)  # fmt: skip
            cost += cost_of(seconds, price.price_per_hour)
        point = series[hour]
        point[0] += allocated
        point[1] += util * allocated
        point[2] += memory * allocated
        point[3] = max(point[3], memory_max)
    timeline = [
        {
            "hour": hour.isoformat(),
            "util_percent": round(p[1] / p[0], 1) if p[0] else 0.0,
            "memory_mib_mean": round(p[2] / p[0]) if p[0] else 0,
            "memory_mib_max": p[3],
        }
        for hour, p in sorted(series.items())
    ]
    util = round(sum(p[1] for p in series.values()) / held, 1) if held else None
    names = dict(GpuModel.objects.filter(pk__in={p.gpu_model_id for p in used_prices})
                 .values_list("pk", "name"))  # fmt: skip
    used_prices = sorted((names.get(p.gpu_model_id, "?"), str(p.price_per_hour), p.currency)
                         for p in used_prices)  # fmt: skip
    wait = None
    if job.queued_at and job.admitted_at:
        wait = int((job.admitted_at - job.queued_at).total_seconds())
    return {
        "job": job.pk,
        "gpus_seen": len(gpus),
        "gpu_hours_held": str(gpu_hours(held)),
        "gpu_hours_used": str(gpu_hours(used)),
        "util_percent": util,
        "cost": str(cents(cost)),
        "currency": used_prices[0][2] if used_prices else "",
        "basis": basis,
        "prices": [{"gpu_model": m, "price_per_hour": p, "currency": c} for m, p, c in used_prices],
        "queue_wait_seconds": wait,
        "energy": job_energy(job=job),
        "utilisation": _utilisation(timeline, fine),
        "low_utilisation": bool(
            held >= LOW_UTIL_AFTER_SECONDS and util is not None and util < LOW_UTIL_PERCENT
        ),
        "timeline": timeline,
    }


def job_energy(*, job: Job) -> dict:
    """The job's GPU energy (measured), facility energy and CO2e (estimates): billing.energy."""
    site = EnergySettings.current()
    sums = energy_sums(group_by=[], job_id=job.pk, settings=site).get((), EnergySums())
    return energy_figures(sums, pue=site.pue)


def _utilisation(timeline: list[dict], fine: dict) -> dict:
    """The chart's series: by the hour, or by the 5 minutes for a job that spans a few hours
    and has them. {"step_minutes", "points": [{"at", "util_percent"}]}."""
    if fine and len(timeline) <= FINE_CHART_HOURS:
        points = [
            {"at": at.isoformat(), "util_percent": round(total / samples, 1)}
            for at, (total, samples) in sorted(fine.items())
            if samples
        ]
        return {"step_minutes": 5, "points": points}
    points = [{"at": p["hour"], "util_percent": p["util_percent"]} for p in timeline]
    return {"step_minutes": 60, "points": points}
