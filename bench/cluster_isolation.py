"""Benchmark: one cluster's trouble stays its own, from the moment it starts (issues 13, 32).

    DATABASE_URL=postgres://postgres:postgres@127.0.0.1:5432/qm_jobs \\
    CELERY_BROKER_URL=redis://127.0.0.1:6379/3 SECRET_KEY=bench DEBUG=false \\
    .venv/bin/python -m bench.cluster_isolation [--rate 10] [--seconds 20]

What runs: a fresh `<name>_bench` database (migrations), two kubesims each in a child process,
"east" and "west", and the portal's web server, Celery worker (prefork, 2 processes) and beat
started by `scripts/serve`.

Three phases, each submitting 1-GPU jobs over the API at `--rate` jobs/s to each cluster:
  1. both healthy (the baseline);
  2. west frozen: at the phase's first submission west's API server freezes (kubesim's freeze:
     connections are accepted and requests read, and no answer ever comes, the worst kind of
     dead: every request to it waits for its read timeout), with the portal's workers in the
     middle of their work on it; measured from that moment, with no settle time;
  3. west still frozen, the next `--seconds`.
Measured: east's submission-to-object latency (request sent → its batch/v1 Job in kubesim's
store), p50 and p99, in each phase. Target: east's p99 in phases 2 and 3 ≤ 1.5 × its p99 in
phase 1, measured in the same run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from bench.jobs_submit import (
    REPO_ROOT,
    SimProcess,
    Submitter,
    fresh_database,
    phase_figures,
    setup_django,
    stop_processes,
    wait_created,
    wait_http,
)

TARGET_RATIO = 1.5


def seed_west(kubeconfig: str) -> str:
    """The second cluster with its own pool and quota for the bench team."""
    from fleet.models import Cluster, GpuModel, NodePool
    from queues.models import Quota, Team
    from queues.services.reconcile import cluster_reconcile

    west = Cluster.objects.create(name="west", kubeconfig_path=kubeconfig)
    pool = NodePool.objects.create(
        cluster=west, name="west-a100", gpu_model=GpuModel.objects.get(),
        node_selector={"accelerator": "nvidia-a100-80gb"},
    )  # fmt: skip
    Quota.objects.create(team=Team.objects.get(slug="bench"), pool=pool, nominal_gpus=512)
    cluster_reconcile(cluster_id=west.pk)
    return pool.name


def phase(east: Submitter, west: Submitter, sim: SimProcess, rate: float, seconds: float,
          at_start=None):  # fmt: skip
    """Submit to both clusters for `seconds`; `at_start()` runs at the first submission."""
    count = int(rate * seconds)
    start = time.time() + 0.2
    west_futures = [
        west.executor.submit(west.submit, 100000 + i, start + i / rate) for i in range(count)
    ]
    if at_start is not None:
        time.sleep(max(0.0, start - time.time()))
        at_start()
    results = east.run(count, rate, start)
    for future in west_futures:
        future.result()
    times = wait_created(sim, [i for i, _ in results if i], 60)
    return phase_figures(results, times, start)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=10.0, help="jobs/s to each cluster")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each phase")
    args = parser.parse_args(argv)
    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        raise SystemExit("Set DATABASE_URL=postgres://... (and CELERY_BROKER_URL=redis://...)")

    east_sim = SimProcess()
    west_sim = SimProcess()
    os.environ["DATABASE_URL"] = fresh_database()
    os.environ.setdefault("EMAIL_BACKEND", "django.core.mail.backends.dummy.EmailBackend")
    setup_django()
    import redis
    from django.conf import settings

    from bench.jobs_submit import seed
    from fleet.models import Cluster
    from kubesim.testing import free_port

    procs = []
    try:
        token, east_pool = seed(east_sim.kubeconfig)
        Cluster.objects.filter(name="bench").update(name="east")
        west_pool = seed_west(west_sim.kubeconfig)
        redis.Redis.from_url(settings.CELERY_BROKER_URL).flushdb()
        port = free_port()
        env = {**os.environ, "WEB_BIND": f"127.0.0.1:{port}", "LOG_LEVEL": "WARNING",
               "WORKER_CONCURRENCY": "2", "KUBE_QPS": "200", "KUBE_BURST": "400"}  # fmt: skip
        quiet = {"cwd": REPO_ROOT, "env": env, "stdout": subprocess.DEVNULL}
        serve = str(REPO_ROOT / "scripts" / "serve")
        procs = [subprocess.Popen([serve, role], **quiet) for role in ("web", "worker", "beat")]
        base = f"http://127.0.0.1:{port}"
        wait_http(f"{base}/healthz")
        east = Submitter(base, token, east_pool, 8)
        west = Submitter(base, token, west_pool, 8)
        warm = east.run(10, None, time.time())
        wait_created(east_sim, [i for i, _ in warm if i], 30)

        healthy = phase(east, west, east_sim, args.rate, args.seconds)
        frozen = phase(east, west, east_sim, args.rate, args.seconds, at_start=west_sim.freeze)
        later = phase(east, west, east_sim, args.rate, args.seconds)
        west_row = Cluster.objects.get(name="west")
    finally:
        stop_processes(procs)
        east_sim.stop()
        west_sim.stop()

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\nCluster isolation: {args.rate:.0f} jobs/s to each of two clusters, "
          f"{args.seconds:.0f} s per phase (errors: {east.errors} east; "
          f"load average at the end {load} on {os.cpu_count()} cores)")  # fmt: skip
    phases = (("both healthy", healthy), ("west frozen, from then", frozen),
              ("west frozen, next", later))  # fmt: skip
    for label, figures in phases:
        print(
            f"  {label:23s} east: {figures['created']}/{figures['submitted']} created, "
            f"p50 {figures['p50'] * 1000:.0f} ms, p99 {figures['p99'] * 1000:.0f} ms"
        )
    print(f"  west recorded as unreachable since {west_row.unreachable_since} "
          f"({west_row.last_error[:120]})")  # fmt: skip
    for label, figures in phases[1:]:
        ratio = figures["p99"] / healthy["p99"] if healthy["p99"] else float("nan")
        print(
            f"east p99 with {label} = {ratio:.2f}× its p99 with both healthy "
            f"(target ≤ {TARGET_RATIO}: {'met' if ratio <= TARGET_RATIO else 'MISSED'}); "
            f"all east jobs created: {figures['created'] == figures['submitted']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
