"""Benchmark: job submission through the API, the database, Celery and kubesim to object created.

Run by hand (not a test), with PostgreSQL and Redis:

    DATABASE_URL=postgres://postgres:postgres@127.0.0.1:5432/qm_jobs \\
    CELERY_BROKER_URL=redis://127.0.0.1:6379/3 SECRET_KEY=bench DEBUG=false \\
    .venv/bin/python -m bench.jobs_submit [--rate 150] [--seconds 10] [--burst 500]

What runs: a fresh database `<DATABASE_URL name>_bench` (built by the migrations), kubesim in
a child process (CRDs, Kueue controllers, 64 A100 nodes), and the portal's web server and Celery
worker started by `scripts/serve`, as in production but on one machine (see start_processes for
the settings). Client threads submit 1-GPU jobs with an API token over HTTP
(`POST /api/v1/jobs/`). A job counts as done when its batch/v1 Job appears in kubesim's store (a
store subscriber stamps the time).

Measured: sustained jobs/s at an offered rate, p50/p99 latency from request sent to object
created, a burst of N jobs fired within about one second and the time until all exist, and the
API writes kubesim received per job (POST/PUT/PATCH/DELETE requests, counted in its HTTP handler).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlparse, urlunparse

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DIR = Path(os.environ.get("QM_SHARED_DIR", REPO_ROOT.parent / "shared"))
KUEUE_PUBLISHED_RATE = 42.0  # workloads/s, Kueue's scheduler performance test
TARGETS = {"rate": 100.0, "p99": 1.0, "burst_drain": 10.0, "writes_per_job": 1.2}
FLEET = {
    "pools": [
        {"name": "a100", "gpuModel": "NVIDIA A100-SXM4-80GB", "nodes": 64, "gpusPerNode": 8,
         "labels": {"accelerator": "nvidia-a100-80gb"}},
    ]
}  # fmt: skip


def fresh_database() -> str:
    """An empty `<name>_bench` database next to DATABASE_URL's; returns its URL."""
    from bench.db import ensure_database

    url = urlparse(os.environ["DATABASE_URL"])
    bench_url = urlunparse(url._replace(path=url.path + "_bench"))
    ensure_database(bench_url, fresh=True)
    return bench_url


def setup_django():
    """Django on the bench database, built by the migrations."""
    from bench.db import setup_django as migrate

    migrate()


class WriteCounter:
    """Counts write requests kubesim's HTTP handler serves."""

    def __init__(self):
        from kubesim import server

        self.count = 0
        self.lock = threading.Lock()
        handler = server._Handler
        for verb in ("do_POST", "do_PUT", "do_PATCH", "do_DELETE"):
            original = getattr(handler, verb)
            setattr(handler, verb, self._wrap(original))

    def _wrap(self, original):
        counter = self

        def counted(handler_self):
            with counter.lock:
                counter.count += 1
            return original(handler_self)

        return counted


def _kubesim_main(conn) -> None:
    """Child process: kubesim with a write counter and a store subscriber stamping creations."""
    from kubesim.testing import running_kubesim

    counter = WriteCounter()
    times: dict[int, float] = {}

    def on_event(etype, rt, obj):
        if etype != "ADDED" or rt.group != "batch" or rt.plural != "jobs":
            return
        job_id = (obj["metadata"].get("labels") or {}).get("quartermaster.dev/job-id", "")
        if job_id.isdigit():
            times.setdefault(int(job_id), time.time())

    with running_kubesim(fleet=FLEET, crds_dir=SHARED_DIR / "crds") as sim:
        sim.store.subscribe(on_event)
        conn.send(sim.kubeconfig)
        while True:
            command = conn.recv()
            if command == "stop":
                break
            if command in ("freeze", "thaw"):  # hang like a frozen API server, or answer again
                getattr(sim, command)()
                conn.send(command)
                continue
            conn.send((counter.count, dict(times)))


class SimProcess:
    """kubesim in its own process, so its CPU use does not slow the clients' threads."""

    def __init__(self):
        import multiprocessing

        ctx = multiprocessing.get_context("fork")
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_kubesim_main, args=(child,), daemon=True)
        self.process.start()
        self.kubeconfig = self.conn.recv()

    def stats(self) -> tuple[int, dict[int, float]]:
        self.conn.send("stats")
        return self.conn.recv()

    def freeze(self) -> None:
        """From now on, accept connections and answer nothing (kubesim's freeze)."""
        self.conn.send("freeze")
        self.conn.recv()

    def thaw(self) -> None:
        self.conn.send("thaw")
        self.conn.recv()

    def stop(self) -> None:
        self.conn.send("stop")
        self.process.join(timeout=15)


def seed(kubeconfig: str) -> tuple[str, str]:
    """Cluster, pool, tenancy, tier, quota, a user with an API token; queues reconciled."""
    from django.contrib.auth import get_user_model

    from fleet.models import Cluster, GpuModel, NodePool
    from queues.models import Department, Membership, PriorityTier, Quota, Team
    from queues.services.reconcile import cluster_reconcile
    from queues.services.tenancy import api_token_create

    cluster = Cluster.objects.create(name="bench", kubeconfig_path=kubeconfig, is_default=True)
    model = GpuModel.objects.create(name="A100-SXM4-80GB")
    pool = NodePool.objects.create(
        cluster=cluster, name="a100", gpu_model=model,
        node_selector={"accelerator": "nvidia-a100-80gb"},
    )  # fmt: skip
    dept = Department.objects.create(slug="research", name="Research")
    team = Team.objects.create(slug="bench", name="Bench", namespace="bench", department=dept)
    user = get_user_model().objects.create_user("bench", "bench@example.org", "x")
    Membership.objects.create(user=user, team=team, role="member")
    PriorityTier.objects.create(name="experiment", value=100, is_default=True)
    Quota.objects.create(team=team, pool=pool, nominal_gpus=512, borrowing_limit=0)
    cluster_reconcile(cluster_id=cluster.pk)
    _, raw = api_token_create(user=user, name="bench")
    return raw, pool.name


def start_processes(env: dict, port: int, args) -> list:
    """The portal's web server and worker through scripts/serve, as the Procfile and compose
    start them, with the bench's process settings; their logs go nowhere."""
    env = {
        **env,
        "WEB_BIND": f"127.0.0.1:{port}",
        "WEB_WORKERS": str(args.web_workers),
        "WEB_THREADS": str(args.web_threads),
        "WORKER_POOL": args.worker_pool,
        "WORKER_CONCURRENCY": str(args.worker_concurrency),
        "LOG_LEVEL": "WARNING",
        # The client-side rate limit (each cluster's, shared by the processes): the default
        # 50 requests/s would cap the applies below the rate this bench offers.
        "KUBE_QPS": str(args.kube_qps),
        "KUBE_BURST": str(args.kube_qps * 2),
    }
    serve = str(REPO_ROOT / "scripts" / "serve")
    quiet = {"cwd": REPO_ROOT, "env": env, "stdout": subprocess.DEVNULL}
    return [subprocess.Popen([serve, role], **quiet) for role in ("web", "worker")]


def stop_processes(procs: list) -> None:
    """Terminate the portal's processes, killing those that do not stop within 15 s."""
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()


def wait_http(url: str, timeout: float = 90.0) -> None:
    """Until the URL answers below 500 (a loaded machine takes the ASGI workers a while)."""
    import requests

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if requests.get(url, timeout=5).status_code < 500:
                return
        except requests.RequestException:
            pass
        time.sleep(0.2)
    raise SystemExit(f"{url} did not come up")


class Submitter:
    """Posts jobs over HTTP from a pool of threads, one keep-alive connection per thread.

    http.client rather than requests: the load generator shares the two cores with the system
    it measures, and requests costs about three times as much CPU per call.
    """

    def __init__(self, base: str, token: str, pool: str, threads: int):
        url = urlparse(base)
        self.host, self.port = url.hostname, url.port
        self.path = "/api/v1/jobs/"
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        self.pool = pool
        self.local = threading.local()
        self.executor = ThreadPoolExecutor(max_workers=threads)
        self.errors = 0
        self.lock = threading.Lock()
        self.response_times: list[float] = []

    def _connection(self) -> http.client.HTTPConnection:
        if getattr(self.local, "connection", None) is None:
            self.local.connection = http.client.HTTPConnection(self.host, self.port, timeout=30)
        return self.local.connection

    def _post(self, body: bytes) -> tuple[int, bytes]:
        connection = self._connection()
        try:
            connection.request("POST", self.path, body=body, headers=self.headers)
            response = connection.getresponse()
            return response.status, response.read()
        except (OSError, http.client.HTTPException):
            connection.close()
            self.local.connection = None
            raise

    def submit(self, n: int, at: float | None = None) -> tuple[int | None, float]:
        if at is not None:
            delay = at - time.time()
            if delay > 0:
                time.sleep(delay)
        body = json.dumps({
            "name": f"bench {n}", "image": "ghcr.io/acme/train:1.0",
            "command": ["python", "train.py"], "workers": 1, "gpus_per_worker": 1,
            "pool": self.pool, "max_runtime_seconds": 3600, "expected_runtime_seconds": 3600,
        }).encode()  # fmt: skip
        sent = time.time()
        try:
            status, content = self._post(body)
        except (OSError, http.client.HTTPException) as exc:
            with self.lock:
                self.errors += 1
            print(f"  submit {n}: {exc!r}", file=sys.stderr)
            return None, sent
        with self.lock:
            self.response_times.append(time.time() - sent)
        if status != 201:
            with self.lock:
                self.errors += 1
            print(f"  submit {n}: {status} {content[:200]!r}", file=sys.stderr)
            return None, sent
        return json.loads(content)["id"], sent

    def run(self, count: int, rate: float | None, start: float) -> list[tuple[int | None, float]]:
        futures = [
            self.executor.submit(self.submit, i, start + i / rate if rate else None)
            for i in range(count)
        ]
        return [f.result() for f in futures]


def wait_created(sim: SimProcess, ids: list[int], timeout: float) -> dict[int, float]:
    """Creation times once every id exists (or the timeout passes)."""
    deadline = time.monotonic() + timeout
    while True:
        _, times = sim.stats()
        if all(i in times for i in ids) or time.monotonic() > deadline:
            return times
        time.sleep(0.2)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def phase_figures(results, times: dict[int, float], start: float) -> dict:
    done = [(i, sent) for i, sent in results if i is not None and i in times]
    latencies = [times[i] - sent for i, sent in done]
    last = max((times[i] for i, _ in done), default=start)
    return {
        "submitted": len(results),
        "created": len(done),
        "elapsed": last - start,
        "rate": len(done) / (last - start) if last > start else 0.0,
        "p50": statistics.median(latencies) if latencies else float("nan"),
        "p99": percentile(latencies, 0.99) if latencies else float("nan"),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=150.0, help="offered jobs/s (sustained)")
    parser.add_argument("--seconds", type=float, default=10.0, help="sustained phase length")
    parser.add_argument("--burst", type=int, default=500, help="jobs fired at once")
    parser.add_argument("--web-workers", type=int, default=2)
    parser.add_argument("--web-threads", type=int, default=2)
    parser.add_argument("--worker-pool", default="prefork", help="prefork, threads or solo")
    parser.add_argument("--worker-concurrency", type=int, default=2)
    parser.add_argument(
        "--kube-qps", type=int, default=200, help="KUBE_QPS (the cluster's, for all processes)"
    )
    parser.add_argument("--threads", type=int, default=48, help="client threads")
    args = parser.parse_args(argv)

    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        raise SystemExit("Set DATABASE_URL=postgres://... (and CELERY_BROKER_URL=redis://...)")
    sim = SimProcess()  # forked before Django sets up connections
    os.environ["DATABASE_URL"] = fresh_database()
    os.environ.setdefault("EMAIL_BACKEND", "django.core.mail.backends.dummy.EmailBackend")
    setup_django()
    import redis
    from django.conf import settings

    from kubesim.testing import free_port

    procs = []
    try:
        token, pool = seed(sim.kubeconfig)
        redis.Redis.from_url(settings.CELERY_BROKER_URL).flushdb()
        port = free_port()
        procs = start_processes(dict(os.environ), port, args)
        base = f"http://127.0.0.1:{port}"
        wait_http(f"{base}/healthz")
        submitter = Submitter(base, token, pool, args.threads)
        warm = submitter.run(20, None, time.time())  # connections, imports, discovery
        wait_created(sim, [i for i, _ in warm if i], 20)
        time.sleep(1.0)
        submitter.response_times.clear()

        writes_before, _ = sim.stats()
        count = int(args.rate * args.seconds)
        start = time.time() + 0.2
        results = submitter.run(count, args.rate, start)
        times = wait_created(sim, [i for i, _ in results if i], 60)
        sustained = phase_figures(results, times, start)

        time.sleep(1.0)
        start = time.time()
        burst_results = submitter.run(args.burst, None, start)
        fired = max(sent for _, sent in burst_results) - start
        times = wait_created(sim, [i for i, _ in burst_results if i], 60)
        burst = phase_figures(burst_results, times, start)
        jobs = sustained["created"] + burst["created"]
        writes_after, _ = sim.stats()
        writes = (writes_after - writes_before) / jobs if jobs else float("nan")
    finally:
        stop_processes(procs)
        sim.stop()

    api = sorted(submitter.response_times)
    report(args, sustained, burst, fired, writes, submitter.errors)
    print(
        f"API response time (both phases): p50 {percentile(api, 0.5) * 1000:.0f} ms, "
        f"p99 {percentile(api, 0.99) * 1000:.0f} ms; load average now "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    return 0


def report(args, sustained, burst, fired, writes, errors) -> None:
    rate = sustained["rate"]
    print(f"\nJob submission benchmark (API → DB → Celery → kubesim), errors: {errors}")
    print(
        f"sustained: offered {args.rate:.0f} jobs/s for {args.seconds:.0f} s → "
        f"{sustained['created']}/{sustained['submitted']} created, {rate:.1f} jobs/s "
        f"= {rate / KUEUE_PUBLISHED_RATE:.2f}× Kueue's ~{KUEUE_PUBLISHED_RATE:.0f} workloads/s "
        f"(target ≥ {TARGETS['rate']:.0f}: {'met' if rate >= TARGETS['rate'] else 'MISSED'})"
    )
    print(
        f"latency request→object: p50 {sustained['p50'] * 1000:.0f} ms, "
        f"p99 {sustained['p99'] * 1000:.0f} ms "
        f"(target p99 ≤ {TARGETS['p99']:.0f} s: "
        f"{'met' if sustained['p99'] <= TARGETS['p99'] else 'MISSED'})"
    )
    print(
        f"burst: {burst['submitted']} jobs fired in {fired:.2f} s, all created after "
        f"{burst['elapsed']:.2f} s ({burst['created']} created; p50 {burst['p50']:.2f} s, "
        f"p99 {burst['p99']:.2f} s) (target drain ≤ {TARGETS['burst_drain']:.0f} s: "
        f"{'met' if burst['elapsed'] <= TARGETS['burst_drain'] else 'MISSED'})"
    )
    print(
        f"API writes per job: {writes:.2f} (target ≤ {TARGETS['writes_per_job']}: "
        f"{'met' if writes <= TARGETS['writes_per_job'] else 'MISSED'})"
    )


if __name__ == "__main__":
    sys.exit(main())
