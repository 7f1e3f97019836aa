"""Benchmark B1: the finance-wide monthly report from 7.2 million UsageHour rows in PostgreSQL.

Run by hand (not a test):
    python -m bench.billing_report [--gpus 10000] [--teams 200] [--regenerate]

Uses its own database (BENCH_DATABASE_URL, default
postgres://postgres:postgres@127.0.0.1:5432/qm_billing_bench), created on first use with the
tables built from the models. April 2026 is 10,000 GPUs × 720 hours = 7.2 million rows in four
pools with a price change mid-month, 200 teams, about 100,000 jobs (one job holds three GPUs for
a day), 30 % idle capacity and a little unattributed use; generated with one INSERT … SELECT
over generate_series. Data stays between runs.

Measured in the same run, warm cache, best of three:
- the bare SQL aggregate: SUM of allocated/used/idle seconds GROUP BY team and GPU model;
- build_report(): the whole finance report (one aggregate pass + rollups, top jobs, queue
  waits, budgets, idle capacity), as its time and as a ratio to the bare aggregate;
- peak RSS of this process (target ≤ 1 GiB) and the report's time (target ≤ 3 s).
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from datetime import UTC, date, datetime, timedelta

BENCH_DB = os.environ.get(
    "BENCH_DATABASE_URL", "postgres://postgres:postgres@127.0.0.1:5432/qm_billing_bench"
)
MONTH = date(2026, 4, 1)
HOURS = 720  # April: 10,000 GPUs × 720 h = 7.2 million rows
TARGET_SECONDS = 3.0
TARGET_RSS_MIB = 1024


def _setup_django() -> None:
    from bench.db import setup_django

    setup_django(BENCH_DB)


def generate(gpus: int, teams: int) -> None:
    """Fill the bench database with one month of rows (idempotent per size)."""
    from decimal import Decimal

    from django.contrib.auth import get_user_model
    from django.db import connection, transaction

    from billing.models import Budget, UsageHour
    from fleet.models import Cluster, GpuModel, GpuPrice, NodePool
    from queues.models import Department, Job, PriorityTier, Team

    start = datetime(MONTH.year, MONTH.month, 1, tzinfo=UTC)
    hours = HOURS
    expected = gpus * hours
    if UsageHour.objects.count() == expected:
        return
    print(f"generating {expected:,} rows …", flush=True)
    t0 = time.perf_counter()
    with connection.cursor() as cur:
        for table in ("billing_usagehour", "billing_budget", "queues_job"):
            cur.execute(f"TRUNCATE {table} CASCADE")
    with transaction.atomic():
        cluster, _ = Cluster.objects.get_or_create(
            name="bench", defaults={"kubeconfig_path": "/dev/null", "is_default": True}
        )
        specs = [("A100", "3.2000"), ("H100", "4.5000"), ("L4", "0.8000"), ("L40S", "1.6000")]
        models, pools = [], []
        for name, price in specs:
            model, _ = GpuModel.objects.get_or_create(
                name=name, defaults={"dcgm_model_names": [f"NVIDIA {name}"]}
            )
            GpuPrice.objects.filter(gpu_model=model).delete()
            GpuPrice.objects.create(
                gpu_model=model,
                price_per_hour=Decimal(price),
                effective_from=datetime(2025, 1, 1, tzinfo=UTC),
                effective_to=datetime(2026, 4, 15, tzinfo=UTC),
            )
            GpuPrice.objects.create(
                gpu_model=model,
                price_per_hour=Decimal(price) * Decimal("0.9"),
                effective_from=datetime(2026, 4, 15, tzinfo=UTC),
            )
            models.append(model)
            pool, _ = NodePool.objects.get_or_create(
                cluster=cluster, name=name.lower(), defaults={"gpu_model": model}
            )
            pools.append(pool)
        depts = [
            Department.objects.get_or_create(slug=f"dept-{i}", defaults={"name": f"Dept {i}"})[0]
            for i in range(20)
        ]
        team_rows = [
            Team.objects.get_or_create(
                slug=f"team-{i}",
                defaults={"name": f"Team {i:03d}", "namespace": f"ns-team-{i}",
                          "department": depts[i % 20]},
            )[0]
            for i in range(teams)
        ]  # fmt: skip
        for i, team in enumerate(team_rows[:50]):
            Budget.objects.create(team=team, month=MONTH, amount=Decimal(20000 + 100 * i),
                                  thresholds=[50, 80, 100])  # fmt: skip
        owner, _ = get_user_model().objects.get_or_create(username="bench")
        tier, _ = PriorityTier.objects.get_or_create(name="experiment", defaults={"value": 100})
    # One job holds three GPUs for a day: (gpus / 3) × 31 days of jobs.
    days = hours // 24
    n_jobs = (gpus + 2) // 3 * days
    batch = []
    for j in range(n_jobs):
        day = j % days
        queued = start.replace(day=1 + day)
        batch.append(
            Job(
                team=team_rows[j % teams],
                owner=owner,
                name=f"job-{j}",
                image="x",
                tier=tier,
                max_runtime_seconds=86400,
                state="succeeded",
                queued_at=queued,
                admitted_at=queued.replace(minute=(j * 7) % 60),
            )  # fmt: skip
        )
        if len(batch) == 10000:
            Job.objects.bulk_create(batch)
            batch = []
    Job.objects.bulk_create(batch)
    first_job = Job.objects.order_by("pk").values_list("pk", flat=True).first()
    first_team = team_rows[0].pk
    pool_ids = [p.pk for p in pools]
    model_ids = [m.pk for m in models]
    with connection.cursor() as cur:
        cur.execute(
            """
            INSERT INTO billing_usagehour (
                hour, cluster_id, gpu_uuid, model_name, gpu_model_id, mig_profile, node, pool_id,
                namespace, pod, team_id, job_id, seconds_allocated, seconds_idle, seconds_busy,
                util_mean, memory_used_mib_mean, memory_used_mib_max, energy_joules, sample_count,
                expected_samples, flag_gap, flag_stuck_zero, flag_unknown_model, source,
                util_sum, busy_sum, memory_sum, energy_first_mj, energy_last_mj, last_sample_at,
                exact_times, updated_at)
            SELECT
                %(start)s::timestamptz + make_interval(hours => h),
                %(cluster)s, 'GPU-' || g, 'NVIDIA GPU', (%(models)s::bigint[])[g %% 4 + 1], '',
                'node-' || (g / 8), (%(pools)s::bigint[])[g %% 4 + 1],
                CASE WHEN s.state = 1 THEN 'ns-team-' || s.team ELSE '' END,
                CASE WHEN s.state = 0 THEN ''
                     WHEN s.state = 2 THEN 'stray' ELSE 'pod-' || s.job END,
                CASE WHEN s.state = 1 THEN %(first_team)s + s.team END,
                CASE WHEN s.state = 1 THEN %(first_job)s + s.job END,
                CASE WHEN s.state = 0 THEN 0 ELSE 3600 END,
                CASE WHEN s.state = 0 THEN 3600 ELSE 0 END,
                CASE WHEN s.state = 0 THEN 0 ELSE 1200 + (g * 7 + h) %% 2400 END,
                50.0, 10000, 20000, 1000000, 120, 120, (g + h) %% 997 = 0, false, false,
                'prometheus', 0, 0, 0, NULL, NULL, NULL, false, now()
            FROM generate_series(0, %(gpus)s - 1) AS g
            CROSS JOIN generate_series(0, %(hours)s - 1) AS h
            CROSS JOIN LATERAL (
                SELECT
                    CASE WHEN g %% 500 = 7 THEN 2
                         WHEN hashint4(g * 10007 + h / 24) %% 10 < 3 THEN 0
                         ELSE 1 END AS state,
                    ((g / 3) * %(days)s + h / 24) AS job,
                    (((g / 3) * %(days)s + h / 24) %% %(teams)s) AS team
            ) AS s
            """,
            {
                "start": start, "cluster": cluster.pk, "models": model_ids, "pools": pool_ids,
                "first_team": first_team, "first_job": first_job, "gpus": gpus, "hours": hours,
                "days": days, "teams": teams,
            },
        )  # fmt: skip
        cur.execute("VACUUM ANALYZE billing_usagehour")
    print(f"generated in {time.perf_counter() - t0:.1f} s", flush=True)


def bare_aggregate(start, end) -> int:
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(
            "SELECT team_id, gpu_model_id, SUM(seconds_allocated), SUM(seconds_busy), "
            "SUM(seconds_idle) FROM billing_usagehour WHERE hour >= %s AND hour < %s "
            "GROUP BY team_id, gpu_model_id",
            [start, end],
        )
        return len(cur.fetchall())


def best_of(fn, runs=3) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=10000)
    parser.add_argument("--teams", type=int, default=200)
    parser.add_argument("--regenerate", action="store_true")
    args = parser.parse_args(argv)
    _setup_django()
    from django.db import connection

    from billing.models import UsageDay, UsageDayState, UsageHour
    from billing.periods import month_bounds, next_month
    from billing.selectors.reports import build_report
    from billing.services.rollups import usage_days_mark_dirty, usage_days_refresh_dirty

    if args.regenerate:
        with connection.cursor() as cur:
            cur.execute("TRUNCATE billing_usagehour")
    generate(args.gpus, args.teams)
    rows = UsageHour.objects.count()
    start, end = month_bounds(MONTH)
    bare_aggregate(start, end)  # warm the cache
    bare = best_of(lambda: bare_aggregate(start, end))
    # The report straight from the hourly rows (no daily summaries yet): one aggregate pass.
    UsageDayState.objects.all().delete()
    UsageDay.objects.all().delete()
    t0 = time.perf_counter()
    hourly = build_report(month=MONTH)
    t_hourly = time.perf_counter() - t0
    # Build the daily summaries the way the beat task does (every day marked changed).
    cluster_id = UsageHour.objects.values_list("cluster_id", flat=True).first()
    t0 = time.perf_counter()
    day = MONTH
    while day < next_month(MONTH):
        midnight = datetime(day.year, day.month, day.day, tzinfo=UTC)
        usage_days_mark_dirty(cluster_id=cluster_id, hours=[midnight])
        day += timedelta(days=1)
    refreshed = usage_days_refresh_dirty(now=datetime(2100, 1, 1, tzinfo=UTC))
    t_refresh = time.perf_counter() - t0
    report = {}

    def run():
        report.update(build_report(month=MONTH))

    t_report = best_of(run)
    assert report["totals"] == hourly["totals"], "daily summaries must not change the figures"
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    verdict = "met" if t_report <= TARGET_SECONDS else "MISSED"
    print(f"rows: {rows:,}  teams in report: {len(report['teams'])}  "
          f"daily summary rows: {UsageDay.objects.count():,}")  # fmt: skip
    print(f"total cost: {report['totals']['cost']} {report['currency']}")
    print(f"bare SQL aggregate over the hourly rows: {bare:.2f} s")
    print(
        f"report from the hourly rows only:        {t_hourly:.2f} s ({t_hourly / bare:.2f}× bare)"
    )
    print(f"daily summaries: {refreshed} days built in {t_refresh:.1f} s (beat task, off-line)")
    print(f"finance report (daily summaries): {t_report:.2f} s = {t_report / bare:.2f}× the bare "
          f"aggregate; target ≤ {TARGET_SECONDS:.0f} s: {verdict}")  # fmt: skip
    print(f"peak RSS:           {rss_mib:.0f} MiB (target ≤ {TARGET_RSS_MIB} MiB: "
          f"{'met' if rss_mib <= TARGET_RSS_MIB else 'MISSED'})")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
