"""Benchmark: pod logs through the portal (issue 14's targets).

    DATABASE_URL=postgres://postgres:postgres@127.0.0.1:5432/qm_logs SECRET_KEY=bench \\
    DEBUG=false .venv/bin/python -m bench.pod_logs [--lines 10000] [--requests 20]

What runs: a fresh `<name>_bench` database (migrations) and two kubesim clusters in this
process, registered as the portal's clusters; a researcher's job runs on each. Requests go
through Django's test client to `GET /api/v1/jobs/{id}/logs/`, as a signed-in team member.
  - Tail: on a cluster running 1,000× faster than real time, the job's pod has written more than
    `--lines` lines after a few seconds; `?tail=<lines>` is requested `--requests` times.
    Target: served in ≤ 200 ms (median and p95 reported).
  - Follow: on a cluster at real time, `?follow=true&tail=0` is read for `--follow-seconds`;
    the gaps between arriving lines are measured. Target: a new line within 2 s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time


def _job_on(sim, world, name):
    from queues.models import Job
    from queues.services.jobs.apply import job_apply
    from queues.services.jobs.submit import job_submit

    job = job_submit(user=world["user"], team=world["team"], name=name,
                     image="ghcr.io/acme/train:1", command=["python", "train.py"],
                     gpus_per_worker=1, pool=world["pools"][sim.cluster.pk],
                     max_runtime_seconds=10**6, expected_runtime_seconds=10**6)  # fmt: skip
    job_apply(job_id=job.pk)
    from queues.services.jobs.sync import jobs_sync_cluster

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        jobs_sync_cluster(cluster=job.cluster)
        job.refresh_from_db()
        if job.state == Job.State.RUNNING:
            return job
        time.sleep(0.2)
    raise SystemExit(f"job {name} did not start")


def bench_world():
    """A fresh PostgreSQL database for the run, Django set up on it, and one member of one team
    with a default tier: (user, team). DATABASE_URL must name a PostgreSQL server."""
    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        raise SystemExit("Set DATABASE_URL=postgres://...")
    os.environ.setdefault("SECURE_HTTPS", "false")
    from bench.jobs_submit import fresh_database

    os.environ["DATABASE_URL"] = fresh_database()
    from bench.db import setup_django

    setup_django()
    from django.contrib.auth import get_user_model

    from queues.models import Department, Membership, PriorityTier, Team

    dept = Department.objects.create(slug="research", name="Research")
    team = Team.objects.create(slug="vision", name="Vision", namespace="vision", department=dept)
    user = get_user_model().objects.create_user("alice", "alice@example.org", "x")
    Membership.objects.create(user=user, team=team, role="member")
    PriorityTier.objects.create(name="experiment", value=100, is_default=True)
    return user, team


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--follow-seconds", type=float, default=10.0)
    args = parser.parse_args(argv)
    os.environ.setdefault("ALLOWED_HOSTS", "testserver")
    user, team = bench_world()
    from django.test import Client

    from queues.models import Quota
    from queues.services.reconcile import cluster_reconcile
    from tests.fixtures_cluster import make_sim_cluster

    world = {"user": user, "team": team, "pools": {}}
    with (
        make_sim_cluster(name="fast", time_scale=1000.0) as fast,
        make_sim_cluster(name="real") as real,
    ):
        for sim in (fast, real):
            sim.sync()
            pool = sim.pools["a100"]
            world["pools"][sim.cluster.pk] = pool
            Quota.objects.create(team=team, pool=pool, nominal_gpus=8)
            cluster_reconcile(cluster_id=sim.cluster.pk)
        client = Client()
        client.force_login(user)
        long_job = _job_on(fast, world, "long")
        url = f"/api/v1/jobs/{long_job.pk}/logs/"
        while True:  # until the pod has written enough lines
            text = client.get(url, {"tail": args.lines}).content.decode()
            if len(text.splitlines()) >= args.lines:
                break
            time.sleep(0.5)
        times = []
        for _ in range(args.requests):
            started = time.perf_counter()
            response = client.get(url, {"tail": args.lines})
            body = response.content
            times.append(time.perf_counter() - started)
            assert response.status_code == 200 and body.count(b"\n") == args.lines
        followed = _job_on(real, world, "followed")
        response = client.get(f"/api/v1/jobs/{followed.pk}/logs/", {"follow": "true", "tail": 0})
        arrivals, started = [], time.monotonic()
        for chunk in response.streaming_content:
            arrivals += [time.monotonic()] * chunk.count(b"\n")
            if time.monotonic() - started > args.follow_seconds:
                break
        response.close()
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:], strict=False)]
    median, p95 = statistics.median(times), sorted(times)[int(0.95 * (len(times) - 1))]
    print(f"\nPod logs through the portal API ({args.requests} tails of {args.lines:,} lines)")
    print(f"  tail: median {median * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms "
          f"(target ≤ 200 ms: {'met' if p95 <= 0.2 else 'MISSED'})")  # fmt: skip
    worst = max(gaps) if gaps else float("inf")
    verdict = "met" if worst <= 2 else "MISSED"
    print(f"  follow: {len(arrivals)} lines in {args.follow_seconds:.0f} s, longest wait for a "
          f"new line {worst:.2f} s (target ≤ 2 s: {verdict})")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
