"""Benchmark B3: backfilling hourly usage for 1,000 GPUs from a local Prometheus.

Run by hand (not a test):  python -m bench.billing_backfill [--gpus 1000] [--days 1]

A DCGM data set (GPU_UTIL, GR_ENGINE_ACTIVE, FB_USED, TOTAL_ENERGY_CONSUMPTION every 30 s; each
GPU runs a sequence of jobs with log-normal lengths, median one hour, idle between) is written
as OpenMetrics and turned into TSDB blocks with `promtool tsdb create-blocks-from openmetrics`;
a real Prometheus serves them on a free loopback port. Then every hour is ingested exactly as
the beat task does (billing.services.usage.usage_hour_ingest) into the bench PostgreSQL database
(see bench/billing_report.py).

Reported: total time and time per hour, the month's time extrapolated (hours are independent
queries, so it scales linearly), the largest query in samples (limit 25 million), and this
process's peak RSS (target ≤ 512 MiB, independent of the length of the backfill). A month at
1,000 GPUs is 346 million samples (50 GB of OpenMetrics text), too large to generate here; the
default measures one day and extrapolates.
"""

from __future__ import annotations

import argparse
import math
import random
import resource
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

START = datetime(2026, 5, 4, tzinfo=UTC)
STEP = 30


def write_dataset(path: Path, *, gpus: int, days: int, seed: int = 3) -> int:
    """Write the OpenMetrics file; returns the number of samples."""
    rng = random.Random(seed)
    t0 = int(START.timestamp())
    end = t0 + days * 86400
    # Per GPU: [(start, end, pod or "", namespace, util)]
    plans = []
    for g in range(gpus):
        segments, t = [], t0
        while t < end:
            length = int(min(6 * 3600, max(120, rng.lognormvariate(math.log(3600), 1.0))))
            idle = int(rng.expovariate(1 / 900))
            pod = f"job-{g}-{t}"
            segments.append((t, min(end, t + length), pod, f"team-{rng.randrange(50)}",
                             rng.uniform(20, 95)))  # fmt: skip
            t += length
            if idle and t < end:
                segments.append((t, min(end, t + idle), "", "", 0.0))
                t += idle
        plans.append(segments)
    families = [
        ("DCGM_FI_DEV_GPU_UTIL", "gauge", lambda u, i: f"{u:.0f}"),
        ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", lambda u, i: f"{u / 100 * 0.97:.4f}"),
        ("DCGM_FI_DEV_FB_USED", "gauge", lambda u, i: f"{int(400 * u)}"),
        ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", None),
    ]
    count = 0
    with path.open("w") as out:
        for name, kind, value in families:
            out.write(f"# TYPE {name} {kind}\n")
            for g, segments in enumerate(plans):
                base = (f'UUID="GPU-{g:05d}",gpu="{g % 8}",Hostname="node-{g // 8:04d}",'
                        f'modelName="NVIDIA A100-SXM4-80GB"')  # fmt: skip
                energy = 1e9 * (g + 1)
                for start, stop, pod, ns, util in segments:
                    labels = base + (f',pod="{pod}",namespace="{ns}"' if pod else "")
                    first = start + (-start) % STEP
                    lines = []
                    for ts in range(first, stop, STEP):
                        if value is None:
                            energy += (60 + 3 * util) * STEP * 1000
                            v = f"{energy:.0f}"
                        else:
                            v = value(util, ts)
                        lines.append(f"{name}{{{labels}}} {v} {ts}\n")
                    out.writelines(lines)
                    count += len(lines)
        out.write("# EOF\n")
    return count


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=1000)
    parser.add_argument("--days", type=int, default=1)
    parser.add_argument("--workdir", default=None, help="keep the data set here between runs")
    args = parser.parse_args(argv)
    from bench.billing_report import _setup_django

    _setup_django()
    from django.conf import settings

    from billing.models import IngestState, UsageHour
    from billing.services.usage import usage_hour_ingest
    from fleet.models import Cluster
    from tests.billing.prom import create_blocks, running_prometheus

    work = Path(args.workdir or tempfile.mkdtemp(prefix="qm-b3-"))
    work.mkdir(parents=True, exist_ok=True)
    data = work / f"data-{args.gpus}-{args.days}"
    if not data.exists():
        source = work / "dcgm.om"
        t0 = time.perf_counter()
        samples = write_dataset(source, gpus=args.gpus, days=args.days)
        print(f"wrote {samples:,} samples in {time.perf_counter() - t0:.0f} s", flush=True)
        t0 = time.perf_counter()
        create_blocks(source, data)
        source.unlink()
        print(f"promtool built the blocks in {time.perf_counter() - t0:.0f} s", flush=True)
    cluster, _ = Cluster.objects.get_or_create(name="b3", defaults={"kubeconfig_path": "/dev/null"})
    UsageHour.objects.filter(cluster=cluster).delete()
    IngestState.objects.filter(cluster=cluster).delete()
    settings.DCGM_SCRAPE_INTERVAL = STEP
    hours = args.days * 24
    with running_prometheus(data_dir=data) as url:
        settings.PROMETHEUS_URL = url
        largest = 0
        t_start = time.perf_counter()
        slowest = 0.0
        for h in range(hours):
            t0 = time.perf_counter()
            state = usage_hour_ingest(cluster=cluster, hour=START + timedelta(hours=h))
            slowest = max(slowest, time.perf_counter() - t0)
            largest = max(largest, state.largest_query_samples)
        total = time.perf_counter() - t_start
    rows = UsageHour.objects.filter(cluster=cluster).count()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    month = total / hours * 720
    print(f"{args.gpus:,} GPUs, {hours} hours backfilled into {rows:,} UsageHour rows")
    print(f"total {total:.1f} s, {total / hours:.2f} s per hour (slowest {slowest:.2f} s); "
          f"a 720-hour month ≈ {month / 60:.1f} min")  # fmt: skip
    print(f"largest query: {largest:,} samples (limit 25,000,000)")
    print(f"peak RSS: {rss:.0f} MiB (target ≤ 512 MiB: {'met' if rss <= 512 else 'MISSED'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
