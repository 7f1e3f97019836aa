"""Benchmark: the what-if simulator on a month of jobs (issue #17).

Run by hand (not a test):
    python -m bench.whatif --jobs 20000 --days 30 --history recorded   # the speed target
    python -m bench.whatif --jobs 300 --days 1                         # the accuracy target

Setup, from nothing, in PostgreSQL (BENCH_WHATIF_DATABASE_URL, default a qm_bench_whatif
database built by the migrations): the demo fleet (a100 32, h100 16, l4 16 GPUs), its five
teams in two departments and their quotas and tiers. `--jobs` jobs are spread over `--days`
days (arrivals per team in proportion to its quota, sizes 1–8 GPUs and 2-worker jobs,
log-normal run times whose mean makes the demand 85 % of the fleet's GPU-hours, tiers mixed).

Their history (`--history cluster`) is made by the simulated cluster itself: kubesim's full
controller set (Kueue, Job controller, scheduler on the nodes, kubelet) runs the portal's own
manifests on a discrete-event clock, and each job's first start, its pods and its finish are
written back as the status sync records them. That takes minutes per thousand jobs (the full
controllers re-try every pending workload on every pod event), so the month of 20,000 jobs is
timed on a history recorded plainly (`--history recorded`: each job run at once for its run
time; the replay still queues them all under both configurations).

Measured: the seconds `whatif_compute` takes to replay the window under today's configuration
and a proposal (target <= 60 s, so the ratio to the target is printed), as the worker runs it
(the two replays side by side, one per core) and one after the other (WHATIF_PROCESSES=1, the
figures checked to be the same), and, with a cluster
history, how far the replay of today's configuration is from the waits as they happened: the
relative error of the median and the p90 queue wait over all jobs and per team (target within
10 %).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from datetime import UTC, datetime, timedelta

from bench.db import setup_django

TARGET_SECONDS = 60.0
TARGET_ERROR = 0.10
LOAD = 0.85
# (share, workers, GPUs per worker)
SIZES = ((0.45, 1, 1), (0.25, 1, 2), (0.15, 1, 4), (0.10, 1, 8), (0.05, 2, 4))
# The demo fleet's whole-GPU pools, where the bench's jobs run (its MIG, time-sliced and spot
# pools and its second cluster are left out, so that the figures stay comparable).
BENCH_POOLS = ("a100", "h100", "l4")
TIERS = (("production", 0.1), ("experiment-high", 0.2), ("experiment", 0.55), ("development", 0.15))


def _pick(rng, table):
    roll, acc = rng.random(), 0.0
    for row in table:
        acc += row[0] if isinstance(row[0], float) else row[1]
        if roll < acc:
            return row
    return table[-1]


def seed(*, jobs: int, days: int, seed: int, end: datetime):
    """Fleet, people, quotas and the jobs (not yet run): [(Job, submit offset in s)]."""
    from django.contrib.auth import get_user_model

    from demo import queues as demo_queues
    from demo.fleet import seed_fleet
    from fleet.models import Node, NodePool
    from kubesim.fleet import load_fleet
    from queues.models import Job, PriorityTier, Quota, Team

    demo_queues.seed_people()
    cluster = seed_fleet()
    pools = {p.name: p for p in NodePool.objects.filter(cluster=cluster)}
    fleet_file = os.path.join(os.path.dirname(demo_queues.__file__), "..", "kubesim", "fleets",
                              "demo.yaml")  # fmt: skip
    nodes = load_fleet(fleet_file)
    for node in nodes:
        labels = node["metadata"].get("labels") or {}
        if labels.get("kubesim.dev/pool") not in BENCH_POOLS:
            continue
        pool = next((p for p in pools.values() if all(labels.get(k) == v for k, v in
                     p.node_selector.items())), None)  # fmt: skip
        gpus = int((node["status"]["capacity"] or {}).get("nvidia.com/gpu", 0))
        Node.objects.update_or_create(
            cluster=cluster, name=node["metadata"]["name"],
            defaults={"pool": pool, "gpu_model": pool.gpu_model if pool else None,
                      "gpu_capacity": gpus, "gpu_allocatable": gpus},
        )  # fmt: skip
    for name, (value, preemptible, default, description) in demo_queues.TIERS.items():
        PriorityTier.objects.update_or_create(name=name, defaults={
            "value": value, "preemptible": preemptible, "is_default": default,
            "description": description})  # fmt: skip
    teams = {t.slug: t for t in Team.objects.all()}
    for slug, per_pool in demo_queues.QUOTAS.items():
        for pool_name, (nominal, borrowing, lending) in per_pool.items():
            if pool_name not in BENCH_POOLS:
                continue
            Quota.objects.update_or_create(team=teams[slug], pool=pools[pool_name], defaults={
                "nominal_gpus": nominal, "borrowing_limit": borrowing,
                "lending_limit": lending})  # fmt: skip
    Job.objects.all().delete()
    rng = random.Random(seed)
    tiers = {t.name: t for t in PriorityTier.objects.all()}
    owner = get_user_model().objects.get(username="alice")
    quota_rows = list(Quota.objects.select_related("team", "pool"))
    weights = [q.nominal_gpus for q in quota_rows]
    start = end - timedelta(days=days)
    # Demand: about LOAD of the fleet's GPU-hours over the window, whatever the job count: run
    # times are log-normal (sigma 1) around the mean that makes it so.
    fleet_gpus = sum(n.gpu_capacity for n in Node.objects.filter(cluster=cluster))
    mean_gpus = sum(share * workers * gpus for share, workers, gpus in SIZES)
    mean_runtime = LOAD * fleet_gpus * days * 86400 / (jobs * mean_gpus)
    mu = math.log(mean_runtime) - 0.5
    rows = []
    for i in range(jobs):
        quota = rng.choices(quota_rows, weights)[0]
        _, workers, gpus = _pick(rng, SIZES)
        tier = _pick(rng, [(share, name) for name, share in TIERS])[1]
        offset = rng.random() * days * 86400
        runtime = int(min(12 * 3600, max(120, rng.lognormvariate(mu, 1.0))))
        job = Job(
            team=quota.team, owner=owner, name=f"bench-{i}", image="registry.example/train:1",
            pool=quota.pool, cluster=cluster, tier=tiers[tier], workers=workers,
            gpus_per_worker=gpus, max_runtime_seconds=24 * 3600,
            expected_runtime_seconds=runtime, state=Job.State.SUBMITTED,
            submitted_at=start + timedelta(seconds=offset),
        )  # fmt: skip
        rows.append(job)
    Job.objects.bulk_create(rows, batch_size=2000)
    related = ("team", "team__department", "pool", "tier", "pool__gpu_model")
    created = list(Job.objects.select_related(*related).order_by("submitted_at"))
    for job in created:
        job.k8s_name = f"bench-{job.pk}"
    Job.objects.bulk_update(created, ["k8s_name"], batch_size=2000)
    return cluster, created, start


def run_history(*, cluster, jobs, start, end, fair_sharing: bool = False) -> dict:
    """Run the jobs on kubesim's controllers (discrete-event clock); write back their times.
    `fair_sharing`: Kueue's fair sharing on, as in `make run`."""
    from demo import queues as demo_queues
    from kubesim import resources as R
    from kubesim.clock import Clock
    from kubesim.controllers import Controllers
    from kubesim.fleet import load_fleet
    from kubesim.store import Store
    from queues.backends import backend_named
    from queues.manifests import quotas as qm
    from queues.models import Department, Job, JobPod, PriorityTier, Quota, Team

    clock = Clock(time_scale=1e-9, start=start)
    store = Store(clock=clock.timestamp)
    fleet_file = os.path.join(os.path.dirname(demo_queues.__file__), "..", "kubesim", "fleets",
                              "demo.yaml")  # fmt: skip
    for node in load_fleet(fleet_file):
        if (node["metadata"].get("labels") or {}).get("kubesim.dev/pool") in BENCH_POOLS:
            store.create(R.NODES, node)
    from fleet.models import NodePool

    for pool in NodePool.objects.filter(cluster=cluster, name__in=BENCH_POOLS):
        store.create(R.RESOURCE_FLAVORS, qm.resource_flavor_manifest(pool))
    for tier in PriorityTier.objects.all():
        store.create(R.WORKLOAD_PRIORITY_CLASSES, qm.workload_priority_class_manifest(tier))
    for dept in Department.objects.all():
        store.create(R.COHORTS, qm.cohort_manifest(dept))
    for team in Team.objects.select_related("department"):
        quotas = list(Quota.objects.filter(team=team).select_related("pool"))
        store.ensure_namespaces([team.namespace])
        store.create(R.CLUSTER_QUEUES, qm.cluster_queue_manifest(team, quotas))
        store.create(R.LOCAL_QUEUES, qm.local_queue_manifest(team))
    # What the cluster did, as the status sync records it: a job's first pod start (a preempted
    # job's pods are deleted, so they are watched as they change), its pods' last finish, and a
    # pod that vanished before it ended as Deleted at that moment.
    firsts: dict[str, datetime] = {}
    lasts: dict[str, datetime] = {}
    pods: dict[tuple[str, str], list] = {}  # (job, pod) -> [started, finished, phase]

    def stamp(text: str) -> datetime:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))

    finished: set[tuple[str, str]] = set()

    def record(etype: str, rt, obj: dict) -> None:
        if rt.plural == "jobs" and rt.group == "batch" and etype != "DELETED":
            conditions = (obj.get("status") or {}).get("conditions") or []
            if any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
                   for c in conditions):  # fmt: skip
                finished.add((obj["metadata"]["namespace"], obj["metadata"]["name"]))
            return
        if rt.plural != "pods" or rt.group:
            return
        owner = (obj["metadata"].get("labels") or {}).get("job-name") or ""
        status = obj.get("status") or {}
        started = status.get("startTime")
        if not owner or not started:
            return
        pod = pods.get((owner, obj["metadata"]["name"]))
        if etype == "DELETED":
            if pod is not None and pod[1] is None:
                pod[1], pod[2] = datetime.fromtimestamp(clock.timestamp(), UTC), "Deleted"
            return
        t = stamp(started)
        if owner not in firsts or t < firsts[owner]:
            firsts[owner] = t
        pod = pods.setdefault((owner, obj["metadata"]["name"]), [t, None, "Running"])
        for cs in status.get("containerStatuses") or []:
            terminated = (cs.get("state") or {}).get("terminated") or {}
            if terminated.get("finishedAt"):
                done = stamp(terminated["finishedAt"])
                lasts[owner] = max(lasts.get(owner, done), done)
                pod[1] = done
                pod[2] = "Succeeded" if terminated.get("exitCode", 0) == 0 else "Failed"

    store.subscribe(record)
    controllers = Controllers(store, clock)
    controllers.kueue.fair_sharing = fair_sharing
    controllers.attach()
    controllers.run_until_idle()
    by_name = {job.k8s_name: job for job in jobs}
    pending = sorted(jobs, key=lambda j: j.submitted_at)
    i = 0
    horizon = end.timestamp()
    began = time.monotonic()
    while True:
        nxt_submit = pending[i].submitted_at.timestamp() if i < len(pending) else None
        candidates = [t for t in (nxt_submit, controllers.next_due()) if t is not None]
        if not candidates:
            break
        at = min(candidates)
        if at > horizon:
            break
        now = clock.timestamp()
        if at > now:
            clock.advance(at - now)
        while i < len(pending) and pending[i].submitted_at.timestamp() <= clock.timestamp():
            for obj in backend_named("kueue").job_objects(pending[i]):
                rt = R.JOBS if obj["kind"] == "Job" else R.SERVICES
                store.create(rt, obj)
            i += 1
        controllers.run_until_idle()
        # A finished job's objects go, as the portal's clean-up removes them (the cluster would
        # otherwise hold a month of finished Jobs and pods).
        while finished:
            ns, name = finished.pop()
            store.delete(R.JOBS, ns, name)
        controllers.run_until_idle()
    seconds = time.monotonic() - began
    store.unsubscribe(record)
    changed = []
    running = {owner for (owner, _), (_, finished, _) in pods.items() if finished is None}
    for name, job in by_name.items():
        job.started_at = firsts.get(name)
        job.finished_at = lasts.get(name) if job.started_at else None
        # Started and not finished: running at the end, or preempted and waiting again.
        job.state = (Job.State.SUCCEEDED if job.finished_at else
                     Job.State.RUNNING if name in running else
                     Job.State.PREEMPTED if job.started_at else Job.State.QUEUED)  # fmt: skip
        changed.append(job)
    Job.objects.bulk_update(changed, ["started_at", "finished_at", "state"], batch_size=2000)
    JobPod.objects.bulk_create(
        [JobPod(job=by_name[owner], name=name, namespace=by_name[owner].team.namespace,
                gpus=by_name[owner].gpus_per_worker, started_at=begun, finished_at=done,
                phase=phase)
         for (owner, name), (begun, done, phase) in pods.items() if owner in by_name],
        batch_size=2000,
    )  # fmt: skip
    return {"cluster_seconds": round(seconds, 1), "started": len(firsts),
            "preemptions": controllers.kueue.preemptions}  # fmt: skip


def record_plainly(jobs) -> None:
    """Each job as started at its submission and run its run time, one pod per worker."""
    from queues.models import Job, JobPod

    pods = []
    for job in jobs:
        job.started_at = job.submitted_at
        job.finished_at = job.submitted_at + timedelta(seconds=job.expected_runtime_seconds)
        job.state = Job.State.SUCCEEDED
        pods += [JobPod(job=job, name=f"{job.k8s_name}-{w}", namespace=job.team.namespace,
                        gpus=job.gpus_per_worker, started_at=job.started_at,
                        finished_at=job.finished_at) for w in range(job.workers)]  # fmt: skip
    Job.objects.bulk_update(jobs, ["started_at", "finished_at", "state"], batch_size=2000)
    JobPod.objects.bulk_create(pods, batch_size=2000)


def _error(replayed, actual):
    if replayed is None or actual is None:
        return None
    if actual == 0:
        return 0.0 if replayed == 0 else None
    return abs(replayed - actual) / actual


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--days", type=int, default=1)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--history", choices=("cluster", "recorded"), default="cluster",
        help="cluster: run the jobs on kubesim's controllers first and check the replay's waits "
             "against theirs; recorded: record each job as run at once for its run time "
             "(timing only: kubesim's full controllers take too long for a month of jobs)",
    )  # fmt: skip
    parser.add_argument(
        "--database", default=os.environ.get("BENCH_WHATIF_DATABASE_URL",
                                             "postgres://postgres:postgres@127.0.0.1:5432/qm_bench_whatif"),
    )  # fmt: skip
    parser.add_argument(
        "--fair-sharing", action="store_true",
        help="the cluster runs Kueue's fair sharing (as make run's kubesim does): the history "
             "is made with it, and the replay replays it",
    )  # fmt: skip
    parser.add_argument(
        "--dump",
        help="write the replay's figures (JSON) to this file, e.g. to "
        "check that a change to the engine leaves them as they were",
    )
    args = parser.parse_args(argv)
    setup_django(args.database, fresh=True)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from billing.pricing import percentile
    from planning.services.whatif import whatif_compute
    from queues.models import Job

    end = datetime(2026, 11, 1, tzinfo=UTC)
    cluster, jobs, start = seed(jobs=args.jobs, days=args.days, seed=args.seed, end=end)
    if args.fair_sharing:  # the cluster's ClusterQueues report shares: the replay has it on
        from queues.models import ManagedObject

        ManagedObject.objects.create(
            cluster=cluster, api_version="kueue.x-k8s.io/v1beta2", kind="ClusterQueue",
            name="fair-sharing-on", owner_type="team", owner_id=0,
            live_status={"fairSharing": {"weightedShare": 0}},
        )  # fmt: skip
    if args.history == "recorded":
        record_plainly(jobs)
        print(f"history: {args.jobs} jobs over {args.days} days, each recorded as started at "
              "its submission (waits are not compared)", flush=True)  # fmt: skip
    else:
        history = run_history(cluster=cluster, jobs=jobs, start=start, end=end,
                              fair_sharing=args.fair_sharing)  # fmt: skip
        print(f"history: {args.jobs} jobs over {args.days} days run on kubesim's controllers in "
              f"{history['cluster_seconds']} s; {history['started']} started, "
              f"{history['preemptions']} preemptions", flush=True)  # fmt: skip
    vision = next(j for j in jobs if j.team.slug == "vision")
    change = {"team": vision.team_id, "pool": vision.pool_id, "nominal_gpus": 12,
              "borrowing_limit": 8, "lending_limit": None}  # fmt: skip
    proposal = {"quotas": [change]}
    from django.test import override_settings

    from planning.services.whatif import replay_processes

    processes = replay_processes()
    began = time.monotonic()
    result = whatif_compute(days=args.days, proposal=proposal, now=end)
    seconds = time.monotonic() - began
    # The same what-if with the replays one after the other (WHATIF_PROCESSES=1), in this run.
    with override_settings(WHATIF_PROCESSES=1):
        began = time.monotonic()
        alone = whatif_compute(days=args.days, proposal=proposal, now=end)
        one_by_one = time.monotonic() - began
    if alone != result:
        raise SystemExit("the replays side by side and one after the other disagree")
    if args.dump:
        with open(args.dump, "w") as out:
            json.dump(result, out, indent=1, sort_keys=True)
    recorded = list(Job.objects.filter(submitted_at__gte=start).values_list(
        "team__slug", "submitted_at", "started_at"))  # fmt: skip
    horizon = end
    names = {str(j.team_id): j.team.slug for j in jobs}
    fair = " (fair sharing on)" if result["today"]["fair_sharing"] else ""
    print(f"replay of {result['jobs']} jobs, today's configuration and a proposal{fair}: "
          f"{seconds:.1f} s (target {TARGET_SECONDS:.0f} s: {seconds / TARGET_SECONDS:.2f}x of "
          f"the target), {processes} at once; one after the other {one_by_one:.1f} s "
          f"({one_by_one / TARGET_SECONDS:.2f}x), the same figures")  # fmt: skip
    if args.history == "recorded":
        return {"jobs": args.jobs, "seconds": round(seconds, 1), "processes": processes,
                "ratio_to_target": round(seconds / TARGET_SECONDS, 2),
                "one_after_the_other_seconds": round(one_by_one, 1)}  # fmt: skip
    today = result["today"]["teams"]
    rows = []
    for tid, fig in sorted(today.items(), key=lambda kv: names.get(kv[0], "")):
        team_actual = [max(0.0, ((s or horizon) - sub).total_seconds())
                       for slug, sub, s in recorded if slug == names.get(tid)]  # fmt: skip
        a50, a90 = percentile(team_actual, 0.5), percentile(team_actual, 0.9)
        e50, e90 = _error(fig["wait_p50_seconds"], a50), _error(fig["wait_p90_seconds"], a90)
        rows.append((names.get(tid, tid), fig["wait_p50_seconds"], a50, e50,
                     fig["wait_p90_seconds"], a90, e90))  # fmt: skip
    print(f"{'team':10} {'p50 replay':>11} {'p50 real':>9} {'err':>6} {'p90 replay':>11} "
          f"{'p90 real':>9} {'err':>6}")  # fmt: skip
    for name, r50, a50, e50, r90, a90, e90 in rows:

        def pct(e):
            return "—" if e is None else f"{100 * e:.1f}%"

        print(f"{name:10} {r50 or 0:11.0f} {a50 or 0:9.0f} {pct(e50):>6} {r90 or 0:11.0f} "
              f"{a90 or 0:9.0f} {pct(e90):>6}")  # fmt: skip
    overall = result["today"]["overall"]
    e50 = _error(overall["wait_p50_seconds"], overall["actual_wait_p50_seconds"])
    e90 = _error(overall["wait_p90_seconds"], overall["actual_wait_p90_seconds"])
    print(
        f"all jobs: p50 wait replayed {overall['wait_p50_seconds']} s, as it happened "
        f"{overall['actual_wait_p50_seconds']} s (error {100 * (e50 or 0):.1f} %); p90 "
        f"{overall['wait_p90_seconds']} s against {overall['actual_wait_p90_seconds']} s "
        f"(error {100 * (e90 or 0):.1f} %); within {100 * TARGET_ERROR:.0f} % is the target"
    )
    summary = {"jobs": args.jobs, "seconds": round(seconds, 1),
               "ratio_to_target": round(seconds / TARGET_SECONDS, 2), "teams": rows,
               "error_p50": e50, "error_p90": e90}  # fmt: skip
    return summary


if __name__ == "__main__":
    main(sys.argv[1:])
