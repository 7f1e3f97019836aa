"""Figures for the fleet dashboard, from the database only (inventory sync and job sync).

- Per pool: fleet.selectors.pool_stats plus quota granted vs capacity and fragmentation: free
  GPUs on nodes whose free block is smaller than the smallest per-worker GPU count of the jobs
  waiting for that pool (or for any pool) are "stranded": no waiting job can use them.
- Per team and pool: nominal quota, in use (GPUs of admitted/running jobs), borrowed (use above
  nominal). Lent: within a department and pool, the GPUs borrowed by its teams are attributed to
  the teams with idle lendable quota (idle = nominal − in use, capped by the lending limit),
  largest idle first. Kueue does not report lending per queue, so this is an estimate.
- The optimization calculator: total GPUs; effective = allocated to running pods; wasted = idle
  (allocatable − allocated, of which "stranded" are the fragmented ones); utilisation =
  effective / total; scheduling efficiency = GPUs of admitted jobs / GPUs of all admitted and
  waiting jobs.
"""

from __future__ import annotations

from collections import defaultdict

from django.db import connection, transaction
from django.db.models import Min
from django.utils import timezone

from fleet.models import Cluster
from fleet.selectors.inventory import pool_domains, pool_list, pool_stats
from queues.models import Job, Quota
from queues.selectors.quotas import gpus_in_use, quota_granted_by_pool
from queues.selectors.tenancy import team_list

WAITING_STATES = ("submitted", "queued")
ADMITTED_STATES = ("admitted", "running")


def _pct(part: int, whole: int) -> float | None:
    return round(100.0 * part / whole, 1) if whole else None


def fleet_dashboard(*, user) -> dict:
    """Everything the dashboard shows, in a fixed number of queries, read from one snapshot of
    the database (so no figure is newer than another), with the times its two sources were
    last brought up to date: the nodes (inventory sync) and the jobs (status sync)."""
    outermost = not connection.in_atomic_block  # a test's transaction has its own snapshot
    with transaction.atomic():
        if outermost and connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        figures = _figures(user=user)
        clusters = Cluster.objects.filter(deleted_at__isnull=True, enabled=True)
        figures["as_of"] = {
            "nodes": clusters.aggregate(at=Min("last_sync_at"))["at"],
            "read": timezone.now(),
        }
    return figures


def _figures(*, user) -> dict:
    pools = list(pool_list(user=user))
    stats = pool_stats(pools=pools)
    granted = quota_granted_by_pool()
    waiting_sizes: dict[int | None, int] = {}
    demand = {"waiting": 0, "admitted": 0}
    for pool_id, state, workers, per_worker in Job.objects.filter(
        state__in=WAITING_STATES + ADMITTED_STATES
    ).values_list("pool_id", "state", "workers", "gpus_per_worker"):
        if state in WAITING_STATES:
            demand["waiting"] += workers * per_worker
            if per_worker > 0:
                current = waiting_sizes.get(pool_id)
                waiting_sizes[pool_id] = per_worker if current is None else min(current, per_worker)
        else:
            demand["admitted"] += workers * per_worker

    pool_rows, totals = [], defaultdict(int)
    by_cluster: dict[int, dict] = defaultdict(lambda: defaultdict(int))
    for pool in pools:
        entry = stats[pool.pk]
        sizes = [s for s in (waiting_sizes.get(pool.pk), waiting_sizes.get(None)) if s]
        smallest = min(sizes) if sizes else None
        stranded = sum(b for b in entry["free_blocks"] if smallest and 0 < b < smallest)
        quota = granted.get(pool.pk) or 0
        pool_rows.append(
            {
                "pool": pool,
                **entry,
                "stranded": stranded,
                "smallest_waiting": smallest,
                "quota_granted": quota,
                "quota_pct": _pct(quota, entry["gpus_total"]),
            }
        )
        for key in ("gpus_total", "gpus_allocatable", "gpus_allocated", "gpus_free"):
            totals[key] += entry[key]
            by_cluster[pool.cluster_id][key] += entry[key]
        by_cluster[pool.cluster_id]["quota_granted"] += quota
        totals["quota_granted"] += quota
        totals["stranded"] += stranded

    teams = list(team_list(user=user).order_by("department__name", "name"))
    quotas = list(Quota.objects.filter(team__in=teams).select_related("pool"))
    used = gpus_in_use(teams=teams)
    team_rows = _team_rows(teams, quotas, used)

    idle = max(0, totals["gpus_allocatable"] - totals["gpus_allocated"])
    total_demand = demand["waiting"] + demand["admitted"]
    calculator = {
        "total": totals["gpus_total"],
        "effective": totals["gpus_allocated"],
        "wasted": idle,
        "stranded": totals["stranded"],
        "utilisation_pct": _pct(totals["gpus_allocated"], totals["gpus_total"]),
        "scheduling_efficiency_pct": _pct(demand["admitted"], total_demand),
        "demand_admitted": demand["admitted"],
        "demand_total": total_demand,
    }
    topology = [
        {"pool": pool, "levels": [
            {"name": name, "domains": domains}
            for name, domains in pool_domains(pool=pool).items()
            if pool.topology_level(name)["node_label"] != "kubernetes.io/hostname"
        ]}
        for pool in pools if pool.topology_levels
    ]  # fmt: skip
    return {
        "pools": pool_rows, "departments": team_rows, "calculator": calculator,
        # Free GPUs per topology domain (block, rack) of the pools that describe one.
        "topology": topology,
        # GPUs per cluster and over all of them, for the clusters table.
        "cluster_gpus": {cid: dict(figures) for cid, figures in by_cluster.items()},
        "fleet_gpus": dict(totals),
    }  # fmt: skip


def _team_rows(teams, quotas, used) -> list[dict]:
    by_team_pool = {(q.team_id, q.pool_id): q for q in quotas}
    keys = set(by_team_pool) | set(used)
    team_by_id = {t.pk: t for t in teams}
    figures: dict[int, dict] = {
        t.pk: {"team": t, "nominal": 0, "in_use": 0, "borrowed": 0, "lent": 0} for t in teams
    }
    # department, pool → borrowed total, and the lenders' idle lendable GPUs
    borrowed_in: dict[tuple, int] = defaultdict(int)
    lendable: dict[tuple, list] = defaultdict(list)
    for team_id, pool_id in keys:
        team = team_by_id.get(team_id)
        if team is None:
            continue
        quota = by_team_pool.get((team_id, pool_id))
        nominal = quota.nominal_gpus if quota else 0
        in_use = used.get((team_id, pool_id), 0)
        row = figures[team_id]
        row["nominal"] += nominal
        row["in_use"] += in_use
        row["borrowed"] += max(0, in_use - nominal)
        borrowed_in[(team.department_id, pool_id)] += max(0, in_use - nominal)
        idle = max(0, nominal - in_use)
        if quota is not None and quota.lending_limit is not None:
            idle = min(idle, quota.lending_limit)
        if idle:
            lendable[(team.department_id, pool_id)].append([idle, team_id])
    for key, total in borrowed_in.items():
        for idle, team_id in sorted(lendable.get(key, []), reverse=True):
            if total <= 0:
                break
            share = min(idle, total)
            figures[team_id]["lent"] += share
            total -= share
    departments: dict[int, dict] = {}
    for team in teams:
        dept = departments.setdefault(
            team.department_id,
            {
                "department": team.department,
                "teams": [],
                "nominal": 0,
                "in_use": 0,
                "borrowed": 0,
                "lent": 0,
            },
        )
        row = figures[team.pk]
        dept["teams"].append(row)
        for key in ("nominal", "in_use", "borrowed", "lent"):
            dept[key] += row[key]
    return list(departments.values())
