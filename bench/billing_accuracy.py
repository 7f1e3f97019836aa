"""Benchmark B2: per-job GPU-hour accuracy against a 5-minute-step estimate like OpenCost's.

Run by hand (not a test):  python -m bench.billing_accuracy [--jobs 20000] [--seed 7]

Trace-like jobs: log-normal runtimes with a median of 10 minutes (σ = 1.2, from 20 s to a day),
1-8 GPUs, starts spread over a week. For each job the true GPU time is runtime × GPUs. Three
estimates, as GPU-seconds per job, turned into an error in seconds of runtime:

- samples only: Quartermaster's direct-scrape crediting (billing.dcgm.scrape_usage, the code
  the beat task runs) with the exporter scraped every 30 s at a random phase;
- samples + pod times: the same, then the pod's recorded start and end applied per hour
  (billing.dcgm.seconds_in_hour, what billing.services.usage.usage_pod_lifetimes_apply writes);
- 5-minute steps: the job counted for 300 s at every 5-minute step instant where it runs, the
  way a Prometheus range query with step=5m sees a pod (OpenCost's default resolution).

Targets: every job within 30 s, and a mean error at least 10× smaller than the 5-minute one.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import sys
from datetime import UTC, datetime, timedelta

STEP_OPENCOST = 300
SCRAPE = 30


def _setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("SECRET_KEY", "bench")
    import django

    django.setup()


def trace(n: int, rng: random.Random) -> list[tuple[float, float, int]]:
    """(start, runtime, gpus) in seconds from the epoch of the trace."""
    jobs = []
    for _ in range(n):
        runtime = min(86400.0, max(20.0, rng.lognormvariate(math.log(600), 1.2)))
        start = rng.uniform(0, 7 * 86400)
        gpus = rng.choice((1, 1, 1, 1, 2, 2, 4, 8))
        jobs.append((start, runtime, gpus))
    return jobs


def ours_samples(start: float, end: float, phase: float, origin: datetime) -> int:
    """GPU-seconds of one GPU credited by the scrape path for a pod alive in [start, end)."""
    from billing import dcgm

    sid = dcgm.SeriesId("GPU-x", "node", "NVIDIA L4", "", "ns", "pod")
    sample = dcgm.GpuSample(sid=sid, util=50.0)
    first = math.ceil((start - phase) / SCRAPE)
    credited = 0
    k = first
    while phase + k * SCRAPE < end:
        t = phase + k * SCRAPE
        now = origin + timedelta(seconds=t)
        usages, _ = dcgm.scrape_usage(
            [sample], scraped_at=now, previous_at=now - timedelta(seconds=SCRAPE)
        )
        credited += sum(u.seconds for u in usages)
        k += 1
    return credited


def ours_exact(start: float, end: float, origin: datetime) -> int:
    """GPU-seconds of one GPU after the pod's recorded start and end are applied per hour."""
    from billing import dcgm

    s = origin + timedelta(seconds=int(start))
    f = origin + timedelta(seconds=int(end))
    hour = dcgm.hour_start(s)
    total = 0
    while hour < f:
        total += dcgm.seconds_in_hour(s, f, hour)
        hour += timedelta(hours=1)
    return total


def opencost_like(start: float, end: float) -> int:
    first = math.ceil(start / STEP_OPENCOST)
    count = 0
    k = first
    while k * STEP_OPENCOST < end:
        count += 1
        k += 1
    return count * STEP_OPENCOST


def summary(errors: list[float]) -> dict:
    ordered = sorted(errors)
    return {
        "mean": statistics.fmean(errors),
        "p99": ordered[int(0.99 * (len(ordered) - 1))],
        "max": ordered[-1],
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    _setup()
    from django.conf import settings

    settings.DCGM_SCRAPE_INTERVAL = SCRAPE
    rng = random.Random(args.seed)
    origin = datetime(2026, 3, 2, tzinfo=UTC)
    jobs = trace(args.jobs, rng)
    phase = rng.uniform(0, SCRAPE)
    errors = {"samples only": [], "samples + pod times": [], "5-minute steps": []}
    for start, runtime, gpus in jobs:
        # Pod times are whole seconds, as Kubernetes records them.
        start = float(int(start))
        end = start + float(int(runtime))
        truth = (end - start) * gpus
        estimates = {
            "samples only": ours_samples(start, end, phase, origin) * gpus,
            "samples + pod times": ours_exact(start, end, origin) * gpus,
            "5-minute steps": opencost_like(start, end) * gpus,
        }
        for name, value in estimates.items():
            errors[name].append(abs(value - truth) / gpus)
    runtimes = sorted(r for _, r, _ in jobs)
    print(f"{args.jobs:,} jobs, median runtime {runtimes[len(runtimes) // 2]:.0f} s")
    base = summary(errors["5-minute steps"])
    for name, errs in errors.items():
        s = summary(errs)
        ratio = base["mean"] / s["mean"] if s["mean"] else float("inf")
        print(f"{name:22s} error per job: mean {s['mean']:7.2f} s  p99 {s['p99']:7.1f} s  "
              f"max {s['max']:7.1f} s   5-minute mean / this mean = {ratio:.1f}×")  # fmt: skip
    ours = summary(errors["samples + pod times"])
    ok_max = ours["max"] <= 30
    ok_ratio = ours["mean"] == 0 or base["mean"] / ours["mean"] >= 10
    print(
        f"targets (samples + pod times): every job ≤ 30 s: {'met' if ok_max else 'MISSED'}; "
        f"≥ 10× smaller mean error: {'met' if ok_ratio else 'MISSED'}"
    )
    samples = summary(errors["samples only"])
    print(
        f"without pod times (samples only): every job ≤ 30 s: "
        f"{'met' if samples['max'] <= 30 else 'MISSED'}; ratio "
        f"{base['mean'] / samples['mean']:.1f}×"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
