"""Benchmark: how fast kubesim's Kueue controller admits workloads at fleet scale.

Run by hand (not a test):  python -m bench.kubesim_admission [--jobs 10000] [--via-api]

Setup: 1,250 nodes x 8 GPUs (two flavors), 200 ClusterQueues in 10 cohorts (borrowing and
preemption enabled), one LocalQueue per ClusterQueue, 10,000 suspended Jobs labelled for Kueue.
By default the objects are created directly in the Store (no HTTP), so the figure measures the
controllers, not JSON encoding; --via-api creates the Jobs through the official kubernetes client.
The full controller set runs (Kueue, Job controller, scheduler, kubelet), as in the simulator.

Measured: admissions per second between the first and the last admission, peak RSS.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import sys
import time

from kubesim import resources as R
from kubesim.clock import Clock
from kubesim.controllers import Controllers
from kubesim.fleet import load_fleet
from kubesim.store import Store

KUEUE_PUBLISHED_RATE = 42.0  # workloads/s, Kueue's scheduler performance test (15k workloads)

# (share of jobs, workers, GPUs per worker): single-GPU jobs, full-node jobs, 4-worker gangs.
MIX = ((0.70, 1, 1), (0.20, 1, 8), (0.10, 4, 2))


def build_fleet(nodes: int) -> dict:
    a100 = nodes * 3 // 5
    return {
        "pools": [
            {"name": "a100", "gpuModel": "NVIDIA A100-SXM4-80GB", "nodes": a100,
             "gpusPerNode": 8, "labels": {"accelerator": "a100"}},
            {"name": "h100", "gpuModel": "NVIDIA H100 80GB HBM3", "nodes": nodes - a100,
             "gpusPerNode": 8, "labels": {"accelerator": "h100"}},
        ]
    }  # fmt: skip


def setup_queues(
    store: Store, fleet: dict, cqs: int, cohorts: int, demand: int = 0
) -> list[tuple[str, str]]:
    """Flavors, Cohorts, ClusterQueues and LocalQueues; returns (namespace, localqueue) pairs.

    Nominal quota splits the fleet's GPUs evenly, or `demand` GPUs when given (so that every
    workload can be admitted even though the nodes cannot run them all).
    """
    fleet_gpus = sum(p["nodes"] * p["gpusPerNode"] for p in fleet["pools"])
    total = max(demand, fleet_gpus)
    for pool in fleet["pools"]:
        store.create(
            R.RESOURCE_FLAVORS,
            {"metadata": {"name": pool["name"]}, "spec": {"nodeLabels": pool["labels"]}},
        )
    for c in range(cohorts):
        store.create(R.COHORTS, {"metadata": {"name": f"dept-{c}"}, "spec": {}})
    queues = []
    for i in range(cqs):
        quotas = {
            p["name"]: -(-total * p["nodes"] * p["gpusPerNode"] // (fleet_gpus * cqs))
            for p in fleet["pools"]
        }  # even split, rounded up: the whole fleet (or demand) is somebody's nominal quota
        store.create(
            R.CLUSTER_QUEUES,
            {
                "metadata": {"name": f"team-{i}"},
                "spec": {
                    "cohortName": f"dept-{i % cohorts}",
                    "namespaceSelector": {},
                    "queueingStrategy": "BestEffortFIFO",
                    "preemption": {
                        "withinClusterQueue": "LowerPriority",
                        "reclaimWithinCohort": "Any",
                    },
                    "resourceGroups": [
                        {
                            "coveredResources": ["nvidia.com/gpu"],
                            "flavors": [
                                {
                                    "name": flavor,
                                    "resources": [
                                        {"name": "nvidia.com/gpu", "nominalQuota": quota}
                                    ],
                                }
                                for flavor, quota in quotas.items()
                            ],
                        }
                    ],
                },
            },
        )
        ns = f"team-{i}"
        store.ensure_namespaces([ns])
        store.create(
            R.LOCAL_QUEUES,
            {"metadata": {"name": "default", "namespace": ns}, "spec": {"clusterQueue": ns}},
        )
        queues.append((ns, "default"))
    return queues


def job_manifest(index: int, ns: str, lq: str, rng: random.Random, duration: float) -> dict:
    roll, acc = rng.random(), 0.0
    workers, gpus = MIX[-1][1:]
    for share, w, g in MIX:
        acc += share
        if roll < acc:
            workers, gpus = w, g
            break
    spec = {
        "suspend": True,
        "parallelism": workers,
        "completions": workers,
        "backoffLimit": 0,
        "template": {
            "metadata": {"annotations": {"kubesim.dev/duration-seconds": str(duration)}},
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "train",
                        "image": "registry.example/train:1",
                        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                    }
                ],
            },
        },
    }
    if workers > 1:
        spec["completionMode"] = "Indexed"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"job-{index:05d}",
            "namespace": ns,
            "labels": {"kueue.x-k8s.io/queue-name": lq},
        },
        "spec": spec,
    }


def unique_admitted(engine) -> int:
    """Workloads admitted at least once (admitted now, or finished)."""
    with engine.lock:
        return sum(1 for wl in engine.workloads.values() if wl.state in ("admitted", "finished"))


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--nodes", type=int, default=1_250)
    parser.add_argument("--cluster-queues", type=int, default=200)
    parser.add_argument("--cohorts", type=int, default=10)
    parser.add_argument(
        "--quota",
        choices=("demand", "capacity"),
        default="demand",
        help="nominal quota sized to what the jobs request (default: all can be admitted; pods "
        "beyond the nodes' capacity stay Pending) or to the fleet's GPUs (only what fits)",
    )
    parser.add_argument(
        "--duration",
        type=float,
        default=86400.0,
        help="simulated seconds each pod runs (default a day: admission, not completion, "
        "is measured)",
    )
    parser.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="simulated seconds per real second (e.g. --duration 60 --time-scale 60 makes pods "
        "finish after 1 s, so quota churns)",
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="give up after (real s)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--via-api", action="store_true", help="create Jobs through HTTP")
    args = parser.parse_args(argv)

    rng = random.Random(args.seed)
    clock = Clock(args.time_scale)
    store = Store(clock=clock.timestamp)
    fleet = build_fleet(args.nodes)
    for node in load_fleet(fleet):
        store.create(R.NODES, node)
    namespaces = [(f"team-{i}", "default") for i in range(args.cluster_queues)]
    manifests = [
        job_manifest(i, *namespaces[rng.randrange(len(namespaces))], rng, args.duration)
        for i in range(args.jobs)
    ]
    gpus_requested = sum(
        int(m["spec"]["parallelism"])
        * int(
            m["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
        )
        for m in manifests
    )
    # 15 % headroom: jobs land on queues at random, and cohorts do not lend to each other.
    demand = int(gpus_requested * 1.15) if args.quota == "demand" else 0
    setup_queues(store, fleet, args.cluster_queues, args.cohorts, demand)
    controllers = Controllers(store, clock)
    controllers.attach()
    controllers.run_until_idle()
    engine = controllers.kueue
    controllers.start()
    started = time.monotonic()
    if args.via_api:
        create_via_api(store, clock, manifests)
    else:
        for manifest in manifests:
            store.create(R.JOBS, manifest)
    created = time.monotonic()
    last_progress, last_count = time.monotonic(), 0
    while time.monotonic() - started < args.timeout:
        time.sleep(0.05)
        if engine.admissions != last_count:
            last_count, last_progress = engine.admissions, time.monotonic()
        if unique_admitted(engine) >= args.jobs:
            break
        # Done when nothing was admitted for a while: all fit, or the fleet is full.
        idle_limit = 30.0
        if time.monotonic() - last_progress > idle_limit:
            break
    controllers.stop()
    admitted = engine.admissions
    unique = unique_admitted(engine)
    window = max(1e-9, engine.last_admission - engine.first_admission)
    # Headline: distinct workloads admitted per second (re-admissions after preemption excluded).
    rate = (unique - 1) / window if unique > 1 else 0.0
    all_rate = (admitted - 1) / window if admitted > 1 else 0.0
    result = {
        "benchmark": "kubesim_admission",
        "jobs": args.jobs,
        "nodes": args.nodes,
        "gpus": sum(p["nodes"] * p["gpusPerNode"] for p in fleet["pools"]),
        "gpus_requested": gpus_requested,
        "cluster_queues": args.cluster_queues,
        "cohorts": args.cohorts,
        "via_api": args.via_api,
        "quota": args.quota,
        "pod_duration_s": args.duration,
        "time_scale": args.time_scale,
        "admissions": admitted,
        "workloads_admitted": unique,
        "preemptions": engine.preemptions,
        "admission_window_s": round(window, 3),
        "workloads_admitted_per_s": round(rate, 1),
        "admissions_per_s": round(all_rate, 1),
        "ratio_to_kueue_42_per_s": round(rate / KUEUE_PUBLISHED_RATE, 2),
        "create_s": round(created - started, 3),
        "peak_rss_mib": round(peak_rss_mib(), 1),
        "controller_errors": controllers.errors,
    }
    print(json.dumps(result))
    print(
        f"\nkubesim admitted {unique}/{args.jobs} workloads ({admitted} admissions, "
        f"{engine.preemptions} preemptions) in {window:.2f} s "
        f"(first to last admission): {rate:.0f} workloads/s ({all_rate:.0f} admissions/s) = "
        f"{rate / KUEUE_PUBLISHED_RATE:.1f}x Kueue's published ~42/s "
        f"(target >= 5x); peak RSS {result['peak_rss_mib']:.0f} MiB (target < 1024 MiB).",
        file=sys.stderr,
    )
    return result


def create_via_api(store: Store, clock: Clock, manifests: list[dict]) -> None:
    """Serve the store over HTTP and create the Jobs with the official client."""
    import tempfile

    from kubernetes import client, config

    from kubesim.server import ApiServer, kubeconfig_text

    server = ApiServer(store, host="127.0.0.1", port=0)
    server.start()
    try:
        with tempfile.NamedTemporaryFile("w", suffix=".kubeconfig", delete=False) as fh:
            fh.write(kubeconfig_text(server.url))
        api = client.BatchV1Api(config.new_client_from_config(fh.name))
        for manifest in manifests:
            api.create_namespaced_job(manifest["metadata"]["namespace"], manifest)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
