"""The figures of one scenario's replay: per team, per member, per pool and over all jobs."""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal

from planning.services.whatif.history import left_queue


def _percentile(values, q):
    from billing.pricing import percentile

    value = percentile(values, q)
    return None if value is None else round(value, 1)


def scenario_figures(
    *, runs, busy, quotas, sizes, pools, prices, hours, horizon, end, member_teams=frozenset(),
    sharing=frozenset(),
) -> dict:  # fmt: skip
    """Per team and per pool figures of one scenario's replay, and over all its jobs; for the
    teams in `member_teams` (sharing their queue among members in either scenario), also each
    member's jobs and waits, and whether it shares in this one (`sharing`)."""
    per_team: dict[int, dict] = defaultdict(lambda: {"waits": [], "actual": [], "gpu_s": 0.0,
                                                     "cost": Decimal(0), "preempted": 0,
                                                     "jobs": 0})  # fmt: skip
    per_member: dict[int, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for job, r in runs:
        acc = per_team[job.team_id]
        acc["gpu_s"] += r.gpu_seconds
        acc["preempted"] += r.preempted
        price = prices.get(pools[r.pool].pk if r.pool in pools else None, Decimal(0))
        acc["cost"] += price * Decimal(r.gpu_seconds) / 3600
        if job.carried:  # it holds GPUs in the window, but asked before it
            continue
        acc["jobs"] += 1
        # Waits run from the submission (the portal's delay before the cluster saw the job
        # counts, in both) to the start, or until the job left the queue unstarted, or the end.
        submitted = horizon - (end - job.submitted_at).total_seconds()
        began = r.started if r.started is not None else r.ended
        acc["waits"].append(max(0.0, (began if began is not None else horizon) - submitted))
        if job.team_id in member_teams:
            per_member[job.team_id][job.owner.username].append(acc["waits"][-1])
        # Clock stamps of a second's resolution can put a start just before the submission.
        began = job.started_at or left_queue(job) or end
        acc["actual"].append(max(0.0, (min(began, end) - job.submitted_at).total_seconds()))
    nominal: dict[int, int] = defaultdict(int)
    for (team_id, _), (n, _, _) in quotas.items():
        nominal[team_id] += n
    teams = {}
    for team_id in set(per_team) | set(nominal):
        acc = per_team[team_id]
        gpu_hours = acc["gpu_s"] / 3600
        teams[str(team_id)] = {
            "jobs": acc["jobs"],
            "nominal_gpus": nominal.get(team_id, 0),
            "wait_p50_seconds": _percentile(acc["waits"], 0.5),
            "wait_p90_seconds": _percentile(acc["waits"], 0.9),
            "actual_wait_p50_seconds": _percentile(acc["actual"], 0.5),
            "actual_wait_p90_seconds": _percentile(acc["actual"], 0.9),
            "preempted": acc["preempted"],
            "gpu_hours": round(gpu_hours, 2),
            "utilisation_percent": round(100 * gpu_hours / (nominal[team_id] * hours), 1)
            if nominal.get(team_id) else None,
            "cost": str(acc["cost"].quantize(Decimal("0.01"))),
        }  # fmt: skip
        if team_id in member_teams:
            teams[str(team_id)]["member_fair_sharing"] = team_id in sharing
            teams[str(team_id)]["members"] = {
                name: {"jobs": len(waits), "wait_p50_seconds": _percentile(waits, 0.5),
                       "wait_p90_seconds": _percentile(waits, 0.9)}
                for name, waits in sorted(per_member[team_id].items())
            }  # fmt: skip
    pool_rows = {}
    for name, pool in pools.items():
        capacity = sizes.get(pool.pk, 0)
        used = busy.get(pool.pk, 0.0) / 3600
        pool_rows[str(pool.pk)] = {
            "pool": name, "cluster": pool.cluster.name, "gpus": capacity,
            "busy_gpu_hours": round(used, 2), "idle_gpu_hours": round(capacity * hours - used, 2),
        }  # fmt: skip
    waits = [w for acc in per_team.values() for w in acc["waits"]]
    actual = [w for acc in per_team.values() for w in acc["actual"]]
    overall = {
        "wait_p50_seconds": _percentile(waits, 0.5),
        "wait_p90_seconds": _percentile(waits, 0.9),
        "actual_wait_p50_seconds": _percentile(actual, 0.5),
        "actual_wait_p90_seconds": _percentile(actual, 0.9),
        "preempted": sum(acc["preempted"] for acc in per_team.values()),
    }
    return {"teams": teams, "pools": pool_rows, "overall": overall}
