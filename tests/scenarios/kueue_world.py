"""Teams of a scenario: a namespace, its LocalQueue `lq` and the ClusterQueue behind it, placed in
cohorts, over one flavor of the fleet's A100 pool (32 GPUs: node capacity never limits these
scenarios, quota does)."""

from __future__ import annotations

from dataclasses import dataclass

from tests.scenarios import objects as o
from tests.scenarios.harness import Scenario

RECLAIM = {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}


@dataclass
class Team:
    ns: str
    cq: str


def a100_flavor(sc: Scenario) -> str:
    name = sc.unique("a100")
    sc.create(o.flavor(name, "a100", tolerations=[o.GPU_TOLERATION]))
    return name


def teams(
    sc: Scenario, flavor: str, quotas: dict[str, dict], *, cohorts: dict[str, str] | None = None,
    preemption: dict | None = None, weights: dict[str, str] | None = None, **cq_kwargs,
) -> dict[str, Team]:  # fmt: skip
    """A team per entry of quotas (name -> o.quota's arguments), each ClusterQueue in the cohort
    that `cohorts` names for it."""
    out = {}
    for name, quota in quotas.items():
        ns = sc.namespace(name)
        cq = sc.unique(name)
        sc.create(o.cluster_queue(
            cq, {flavor: [o.quota(**quota)]}, namespaces=[ns],
            cohort=(cohorts or {}).get(name), preemption=preemption,
            weight=(weights or {}).get(name), **cq_kwargs))  # fmt: skip
        sc.create(o.local_queue("lq", cq), ns)
        out[name] = Team(ns, cq)
    return out


def submit(sc: Scenario, team: Team, name: str, gpus: int, seconds: float = 600, **kw) -> None:
    """A one-pod Job of `gpus` A100 GPUs in the team's LocalQueue."""
    sc.create(o.job(name, "lq", {o.GPU: gpus}, annotations=sc.cluster.runs(seconds), **kw),
              team.ns)  # fmt: skip


def reserving(sc: Scenario, team: Team) -> list[str]:
    """The names of the Jobs whose Workloads hold quota in the team's namespace."""
    out = []
    for wl in sc.list("Workload", team.ns):
        if o.is_true(wl, "QuotaReserved"):
            out += [r["name"] for r in wl["metadata"].get("ownerReferences") or []]
    return sorted(out)


def usage(sc: Scenario, cq: str) -> tuple[str, str]:
    """(total, borrowed) GPUs the ClusterQueue reserves, as its status says."""
    status = sc.cq_status(cq)
    for flavor in status.get("flavorsReservation") or []:
        for res in flavor["resources"]:
            if res["name"] == o.GPU:
                return res["total"], res.get("borrowed", "0")
    return "0", "0"


def weighted_share(sc: Scenario, kind: str, name: str) -> int | None:
    status = sc.get(kind, name).get("status") or {}
    return (status.get("fairSharing") or {}).get("weightedShare")
