"""Benchmark: one status sync of a cluster with many active jobs (run by hand, not a test).

    DATABASE_URL=postgres://postgres:postgres@127.0.0.1:5432/qm_jobs \\
    CELERY_BROKER_URL=redis://127.0.0.1:6379/3 SECRET_KEY=bench DEBUG=false \\
    .venv/bin/python -m bench.jobs_sync [--jobs 2000] [--syncs 5]

What runs: the same fresh `<name>_bench` database, kubesim process and seed as jobs_submit
(64 A100 nodes, 512 GPUs, one team with 512 GPUs of quota). `--jobs` 1-GPU jobs are submitted
and applied in this process, so 512 run and the rest wait in Kueue's queue. Then the sync that
the watcher and the beat task run (`jobs_sync_cluster`) runs `--syncs` times in a row: the first
records admissions, pods, positions and estimates; the later ones find nothing changed, which is
what most syncs of a busy cluster see.

Measured per sync: wall time, CPU time of this process (Django and the Kubernetes client; the
database's and kubesim's CPU are not in it), SQL statements and how many of them wrote.
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000, help="active 1-GPU jobs")
    parser.add_argument("--syncs", type=int, default=5, help="syncs to time, in a row")
    args = parser.parse_args(argv)

    from bench.jobs_submit import SimProcess, fresh_database, setup_django

    sim = SimProcess()
    try:
        os.environ["DATABASE_URL"] = fresh_database()
        setup_django()
        rows = run(sim.kubeconfig, args)
    finally:
        sim.stop()
    report(args, rows)
    return 0


def run(kubeconfig: str, args) -> list[dict]:
    from django.contrib.auth import get_user_model
    from django.db import connection

    from bench.jobs_submit import seed
    from fleet.models import Cluster
    from queues.models import Team
    from queues.services.jobs.apply import jobs_apply_ready
    from queues.services.jobs.submit import job_submit
    from queues.services.jobs.sync import jobs_sync_cluster

    _, pool = seed(kubeconfig)
    user = get_user_model().objects.get(username="bench")
    team = Team.objects.get(slug="bench")
    cluster = Cluster.objects.get()
    for i in range(args.jobs):
        job_submit(user=user, team=team, name=f"sync {i}", image="ghcr.io/acme/train:1.0",
                   command=["python", "train.py"], gpus_per_worker=1, pool=pool,
                   max_runtime_seconds=7200, expected_runtime_seconds=3600)  # fmt: skip
    applied = jobs_apply_ready(cluster_id=cluster.pk)
    print(f"applied: {applied}", file=sys.stderr)
    time.sleep(5.0)  # kubesim admits what fits and starts its pods
    rows, sql = [], []

    def count(execute, statement, params, many, context):
        sql.append(statement)
        return execute(statement, params, many, context)

    for _ in range(args.syncs):
        sql.clear()
        wall, cpu = time.perf_counter(), time.process_time()
        with connection.execute_wrapper(count):
            counts = jobs_sync_cluster(cluster=cluster)
        rows.append({
            "wall_s": time.perf_counter() - wall,
            "cpu_s": time.process_time() - cpu,
            "statements": len(sql),
            "writes": sum(s.startswith(("UPDATE", "INSERT", "DELETE")) for s in sql),
            **counts,
        })  # fmt: skip
        time.sleep(1.0)
    return rows


def report(args, rows) -> None:
    from django.db.models import Count

    from queues.models import Job

    states = dict(Job.objects.values_list("state").annotate(n=Count("id")).order_by())
    print(f"\nJob status sync benchmark: {args.jobs} active jobs, now {states}")
    for i, row in enumerate(rows):
        print(
            f"sync {i + 1}: wall {row['wall_s']:.2f} s, CPU {row['cpu_s']:.2f} s, "
            f"{row['statements']} statements ({row['writes']} writes), "
            f"{row['transitions']} transitions, {row['pods']} pod records"
        )
    steady = rows[1:] or rows
    print(
        f"steady state (syncs 2-{len(rows)}): wall {min(r['wall_s'] for r in steady):.2f}–"
        f"{max(r['wall_s'] for r in steady):.2f} s, CPU {min(r['cpu_s'] for r in steady):.2f}–"
        f"{max(r['cpu_s'] for r in steady):.2f} s"
    )


if __name__ == "__main__":
    sys.exit(main())
