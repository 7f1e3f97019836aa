"""Benchmark: one cluster's trouble stays its own (issue 13's isolation target).

    DATABASE_URL=postgres://postgres:postgres@127.0.0.1:5432/qm_jobs \\
    CELERY_BROKER_URL=redis://127.0.0.1:6379/3 SECRET_KEY=bench DEBUG=false \\
    .venv/bin/python -m bench.cluster_isolation [--rate 20] [--seconds 15]

What runs: a fresh `<name>_bench` database (migrations), kubesim in a child process serving the
healthy cluster "east", and the portal's web server, Celery worker (prefork, 2 processes) and
beat started by `scripts/serve`. A second cluster, "west", is registered too.

Two phases, each submitting 1-GPU jobs over the API at `--rate` jobs/s to each cluster:
  1. both healthy: west is a second kubesim cluster (same process, its own API server);
  2. west unreachable: west's kubeconfig points at an address that accepts connections and
     never answers (the worst kind of dead: every request waits for its read timeout), from
     `--settle` seconds after it went dark (the requests that detect it wait their timeout once;
     the target is about a cluster that is down, not the first seconds of its going down).
Measured: east's submission-to-object latency (request sent → its batch/v1 Job in kubesim's
store), p50 and p99, in each phase. Target: p99 with west unreachable ≤ 1.5 × p99 with both
healthy, measured in the same run.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

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


def hanging_server() -> tuple[socket.socket, int]:
    """A listening socket that is never accepted from: connections complete (the kernel's
    backlog) and then no byte ever comes back."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    return sock, sock.getsockname()[1]


def kubeconfig_for(server: str, path: Path) -> str:
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: west\n"
        f"clusters: [{{name: west, cluster: {{server: '{server}'}}}}]\n"
        "contexts: [{name: west, context: {cluster: west, user: west}}]\n"
        "users: [{name: west, user: {token: bench}}]\n"
    )
    return str(path)


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


def phase(east: Submitter, west: Submitter, sim: SimProcess, rate: float, seconds: float):
    count = int(rate * seconds)
    start = time.time() + 0.2
    west_futures = [
        west.executor.submit(west.submit, 100000 + i, start + i / rate) for i in range(count)
    ]
    results = east.run(count, rate, start)
    for future in west_futures:
        future.result()
    times = wait_created(sim, [i for i, _ in results if i], 60)
    return phase_figures(results, times, start)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=20.0, help="jobs/s to each cluster")
    parser.add_argument("--seconds", type=float, default=15.0, help="length of each phase")
    parser.add_argument(
        "--settle", type=float, default=20.0,
        help="seconds between west going dark and the second phase (its detection: the first "
        "requests to it wait for their timeout)",
    )  # fmt: skip
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

    procs, dead = [], None
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

        dead, dead_port = hanging_server()
        path = kubeconfig_for(f"http://127.0.0.1:{dead_port}", Path(env.get("TMPDIR", "/tmp"))
                              / f"qm-bench-west-{os.getpid()}.kubeconfig")  # fmt: skip
        Cluster.objects.filter(name="west").update(kubeconfig_path=path)
        time.sleep(args.settle)  # past the first requests that meet the dead cluster (detection)
        unreachable = phase(east, west, east_sim, args.rate, args.seconds)
        west_row = Cluster.objects.get(name="west")
    finally:
        stop_processes(procs)
        east_sim.stop()
        west_sim.stop()
        if dead is not None:
            dead.close()

    ratio = unreachable["p99"] / healthy["p99"] if healthy["p99"] else float("nan")
    print(f"\nCluster isolation: {args.rate:.0f} jobs/s to each of two clusters, "
          f"{args.seconds:.0f} s per phase (errors: {east.errors} east)")  # fmt: skip
    for label, figures in (("both healthy", healthy), ("west unreachable", unreachable)):
        print(
            f"  {label:17s} east: {figures['created']}/{figures['submitted']} created, "
            f"p50 {figures['p50'] * 1000:.0f} ms, p99 {figures['p99'] * 1000:.0f} ms"
        )
    print(f"  west recorded as unreachable since {west_row.unreachable_since} "
          f"({west_row.last_error[:120]})")  # fmt: skip
    print(
        f"east p99 with west unreachable = {ratio:.2f}× its p99 with both healthy "
        f"(target ≤ {TARGET_RATIO}: {'met' if ratio <= TARGET_RATIO else 'MISSED'}); "
        f"all east jobs created: {unreachable['created'] == unreachable['submitted']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
