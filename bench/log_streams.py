"""Benchmark: followed logs do not starve the portal (issue 32's target).

    DATABASE_URL=postgres://postgres:postgres@127.0.0.1:5432/qm_streams SECRET_KEY=bench \\
    DEBUG=false .venv/bin/python -m bench.log_streams [--follows 50] [--seconds 20]

What runs: a fresh `<name>_bench` database (migrations), kubesim in this process with a
researcher's job running on it, and the real web server as `scripts/serve web` runs it (two
uvicorn workers, four view threads each) in another process. Four clients ask, back to back, for
the job's page (`/jobs/<id>/`, signed in) and `/healthz`, for `--seconds` with no follow open,
then for as long with `--follows` follows of the job's log open (`logs/?follow=1`, each reading
what the pod writes), then for as long again with none. Target: with the follows open, the p99
of the job page and of /healthz within 1.5x of their p99 with none (the worse of the two runs
without, so that one slow phase does not flatter or spoil the figure).
"""

from __future__ import annotations

import argparse
import http.client
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _p(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _measure(port, paths, cookie, seconds, clients=4):
    """Latencies (s) per path, from `clients` threads asking back to back for `seconds`."""
    found = {path: [] for path in paths}
    errors = []
    stop = time.monotonic() + seconds

    def client(offset):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        i = offset
        while time.monotonic() < stop:
            path = paths[i % len(paths)]
            i += 1
            started = time.perf_counter()
            try:
                conn.request("GET", path, headers={"Cookie": cookie})
                answer = conn.getresponse()
                answer.read()
            except (OSError, http.client.HTTPException) as exc:
                errors.append(exc)
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                continue
            if answer.status != 200:
                errors.append(answer.status)
            found[path].append(time.perf_counter() - started)
        conn.close()

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise SystemExit(f"{len(errors)} requests failed, e.g. {errors[:3]}")
    return found


class _Follow(threading.Thread):
    """One follow of the job's log, read as it comes until told to stop."""

    def __init__(self, port, path, token):
        super().__init__(daemon=True)
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.conn.request("GET", path, headers={"Authorization": f"Bearer {token}"})
        self.answer = self.conn.getresponse()
        self.bytes = 0
        self.stopped = False

    def run(self):
        try:
            while not self.stopped:
                chunk = self.answer.read1(65536)
                if not chunk:
                    return
                self.bytes += len(chunk)
        except OSError:
            return

    def stop(self):
        self.stopped = True
        self.conn.sock.shutdown(socket.SHUT_RDWR)  # the reader sees the end, then it closes
        self.join(timeout=10)
        self.conn.close()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--follows", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args(argv)
    from bench.pod_logs import _job_on, bench_world

    user, team = bench_world()
    from django.test import Client

    from queues.models import Quota
    from queues.services.reconcile import cluster_reconcile
    from queues.services.tenancy import api_token_create
    from tests.fixtures_cluster import make_sim_cluster

    token = api_token_create(user=user, name="bench")[1]
    client = Client()
    client.force_login(user)
    cookie = f"sessionid={client.cookies['sessionid'].value}"
    with make_sim_cluster(name="real") as sim:
        sim.sync()
        pool = sim.pools["a100"]
        Quota.objects.create(team=team, pool=pool, nominal_gpus=8)
        cluster_reconcile(cluster_id=sim.cluster.pk)
        job = _job_on(sim, {"user": user, "team": team, "pools": {sim.cluster.pk: pool}}, "log")
        port = _free_port()
        env = {**os.environ, "WEB_BIND": f"127.0.0.1:{port}", "WEB_WORKERS": "2",
               "WEB_THREADS": "4", "LOG_FOLLOWS_PER_USER": str(args.follows),
               "QM_VAR_DIR": str(REPO / "var" / "bench-log-streams")}  # fmt: skip
        server = subprocess.Popen(
            [str(REPO / "scripts" / "serve"), "web"], cwd=REPO, env=env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            for _ in range(120):
                try:
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                    conn.request("GET", "/healthz")
                    conn.getresponse().read()
                    break
                except OSError:
                    time.sleep(0.5)
            paths = [f"/jobs/{job.pk}/", "/healthz"]
            _measure(port, paths, cookie, 3)  # warm up both workers
            before = _measure(port, paths, cookie, args.seconds)
            log = f"/api/v1/jobs/{job.pk}/logs/?follow=1&tail=100"
            follows = [_Follow(port, log, token) for _ in range(args.follows)]
            statuses = [f.answer.status for f in follows]
            if statuses != [200] * args.follows:
                raise SystemExit(f"follows answered {sorted(set(statuses))}")
            for follow in follows:
                follow.start()
            during = _measure(port, paths, cookie, args.seconds)
            streamed = sum(f.bytes for f in follows)
            alive = sum(f.is_alive() for f in follows)
            for follow in follows:
                follow.stop()
            time.sleep(2)
            after = _measure(port, paths, cookie, args.seconds)
        finally:
            server.terminate()
            server.wait(timeout=30)
    print(f"\nThe job page and /healthz, 4 clients back to back, {args.seconds:.0f} s per phase; "
          f"{args.follows} follows open in the middle one ({alive} still streaming at its end, "
          f"{streamed / 1024:.0f} KiB of log read)")  # fmt: skip
    met = True
    for path, name in zip(paths, ("job page", "/healthz"), strict=True):
        base = max(_p(before[path], 0.99), _p(after[path], 0.99))
        loaded = _p(during[path], 0.99)
        ratio = loaded / base
        met &= ratio <= 1.5
        p50s = " / ".join(f"{_p(p[path], 0.5) * 1000:.0f}" for p in (before, during, after))
        p99s = " / ".join(f"{_p(p[path], 0.99) * 1000:.0f}" for p in (before, during, after))
        print(f"  {name}: p50 {p50s} ms, p99 {p99s} ms (none / {args.follows} follows / none; "
              f"{len(during[path])} requests with follows): p99 {ratio:.2f}x of none "
              "(target ≤ 1.5x)")  # fmt: skip
    print(f"  target {'met' if met else 'MISSED'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
