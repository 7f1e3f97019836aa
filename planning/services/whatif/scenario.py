"""One configuration replayed: its queues, pools and jobs, and both scenarios' figures."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.utils import timezone

from fleet.models import Cluster, Node, NodePool
from fleet.models.inventory import GPU_RESOURCE
from kueuemodel.afs import AfsConfig
from kueuemodel.replay.parallel import replay_all, usable_cpus
from planning.services.whatif.agreement import agreement
from planning.services.whatif.figures import scenario_figures
from planning.services.whatif.history import member_memory, replay_jobs, window_jobs
from planning.services.whatif.reservations import (
    queue_timeline,
    reservation_phases,
    reservations_replayed,
)
from queues.manifests.quotas import (
    cluster_queue_manifest,
    cohort_manifest,
    local_queue_manifest,
    member_queue_manifests,
    organisation_cohort_manifest,
)
from queues.models import (
    Membership,
    Quota,
    Team,
)
from queues.selectors.fair_share import clusters_with_fair_sharing
from queues.selectors.quotas import pool_capacity


def _pool_nodes(pool, gpus: int) -> list[int]:
    """The pool's nodes (their GPUs, in name order) resized to `gpus`: a larger pool gets more
    nodes like its largest, a smaller one loses nodes from the end (the last one cut down)."""
    nodes = [n for n in Node.objects.filter(pool=pool).order_by("name")
             .values_list("gpu_capacity", flat=True) if n]  # fmt: skip
    if not nodes:
        return [gpus] if gpus else []
    out, left = [], gpus
    for size in nodes:
        if left <= 0:
            break
        out.append(min(size, left))
        left -= out[-1]
    largest = max(nodes)
    while left > 0:
        out.append(min(largest, left))
        left -= out[-1]
    return out


def replay_queues(
    *, cluster, quotas: dict, jobs=(), weights: dict | None = None, shared: dict | None = None,
    departments: dict | None = None,
) -> tuple[dict, set[int]]:  # fmt: skip
    """The queues of one configuration on one cluster as kueuemodel's replay() takes them
    (its cluster_queues, local_queues and cohorts, rendered as for the cluster), and the ids
    of the teams that share their queue among their members (whose jobs wait in their owner's
    LocalQueue). `quotas`: {(team id, pool id): (nominal, borrowing, lending)}; `jobs`: the
    window's jobs, whose owners get a LocalQueue in such teams beside the members; `weights`,
    `shared`, `departments` as for _scenario."""
    pools = {p.pk: p for p in NodePool.objects.filter(cluster=cluster)}
    by_team: dict[int, list[Quota]] = defaultdict(list)
    for (team_id, pool_id), (nominal, borrowing, lending) in quotas.items():
        if pool_id in pools:
            by_team[team_id].append(Quota(team_id=team_id, pool=pools[pool_id],
                                          nominal_gpus=nominal, borrowing_limit=borrowing,
                                          lending_limit=lending))  # fmt: skip
    teams = Team.objects.select_related("department").in_bulk(list(by_team))
    cohorts = _cohorts({t.department for t in teams.values()}, departments or {})
    cqs, lqs, sharing = [], [], set()
    for team_id, team_quotas in by_team.items():
        team = teams[team_id]
        team.queue_hold_reason = ""  # a what-if asks about quota, not about today's holds
        team.fair_share_weight = (weights or {}).get(team_id, team.fair_share_weight)
        team.member_fair_sharing = (shared or {}).get(team_id, team.member_fair_sharing)
        cqs.append(cluster_queue_manifest(team, team_quotas))
        lqs.append(local_queue_manifest(team))
        if team.member_fair_sharing:
            sharing.add(team_id)
            lqs += member_queue_manifests(team, _members(team, jobs))
    queues = {"cluster_queues": cqs, "local_queues": lqs, "cohorts": cohorts}
    return queues, sharing


def _scenario(
    *, cluster, quotas: dict, sizes: dict, tier_values: dict, history, start, end,
    weights: dict | None = None, fair_sharing: bool = False, shared: dict | None = None,
    departments: dict | None = None,
):  # fmt: skip
    """One configuration on one cluster, ready to replay: [(job, replayed job)], the cluster's
    pools by id and replay()'s arguments (the replayed jobs among them).
    `weights`: fair-sharing weights by team id, instead of the teams' own; `shared`: whether
    each team shares its queue fairly among its members, instead of as it does today;
    `departments`: by department id, (shares with the organisation, weight) instead of its
    own (either None: as it is)."""
    pools = {p.pk: p for p in NodePool.objects.filter(cluster=cluster)}
    mine = [j for j in history if (j.admitted_pool or j.pool or j).cluster_id == cluster.pk]
    # The reservations in force in the window change the queues when they did on the cluster.
    phases = reservation_phases(cluster=cluster, start=start, end=end)
    sharing: set[int] = set()

    def render(at_quotas: dict) -> dict:
        rendered, shared_by = replay_queues(cluster=cluster, quotas=at_quotas, jobs=mine,
                                            weights=weights, shared=shared,
                                            departments=departments)  # fmt: skip
        sharing.update(shared_by)
        return rendered

    queues, changes = queue_timeline(quotas=quotas, phases=phases, start=start, end=end,
                                     render=render)  # fmt: skip
    jobs = replay_jobs(mine, start=start, end=end, tier_values=tier_values, shared=sharing)
    config = member_fair_sharing_config() if sharing else None
    if sharing:  # the members' usage Kueue remembered when the window opened
        memory = member_memory(cluster=cluster, team_ids=sharing, start=start, config=config)
        for lq in queues["local_queues"]:
            key = (lq["metadata"]["namespace"], lq["metadata"]["name"])
            if memory.get(key):
                lq["status"] = {"fairSharing": {"admissionFairSharingStatus": {
                    "consumedResources": {GPU_RESOURCE: f"{memory[key]:.6f}"},
                    "lastUpdate": start.strftime("%Y-%m-%dT%H:%M:%SZ")}}}  # fmt: skip
    run = {
        **queues,
        "pools": {p.name: _pool_nodes(p, sizes.get(p.pk, 0)) for p in pools.values()},
        "jobs": [r for _, r in jobs], "horizon": (end - start).total_seconds(), "origin": start,
        "fair_sharing": fair_sharing,
        "admission_fair_sharing": config,
        "queue_changes": changes,
    }  # fmt: skip
    return jobs, pools, run


def _cohorts(departments, changes: dict) -> list[dict]:
    """The departments' Cohorts as the cluster has them, with `changes` (department id ->
    (shares with the organisation, weight), None for as it is), and the organisation's Cohort
    when any department shares."""
    out = []
    for department in sorted(departments, key=lambda d: d.slug):
        shares, weight = changes.get(department.pk, (None, None))
        if shares is not None:
            department.shares_with_organisation = shares
        if weight is not None:
            department.fair_share_weight = Decimal(weight)
        out.append(cohort_manifest(department))
    if any(d.shares_with_organisation for d in departments):
        out.append(organisation_cohort_manifest())
    return out


def _members(team, jobs) -> list[tuple]:
    """[(user, weight)]: the team's members and the owners of its jobs in the window."""
    out = {m.user_id: (m.user, m.fair_share_weight)
           for m in Membership.objects.filter(team=team).select_related("user")}  # fmt: skip
    for job in jobs:
        if job.team_id == team.pk and job.owner_id not in out:
            out[job.owner_id] = (job.owner, None)
    return list(out.values())


def member_fair_sharing_config() -> AfsConfig:
    """Kueue's admission fair sharing as the replay runs it: the portal's half-life, samples
    every five minutes, GPUs only (the configuration README asks the clusters for)."""
    return AfsConfig(
        half_life=float(settings.FAIR_SHARE_HALF_LIFE_HOURS) * 3600, sampling=300.0,
        weights={"cpu": 0.0, "memory": 0.0},
    )  # fmt: skip


def _prices(pools, at) -> dict:
    from billing.selectors.prices import price_book_for

    book = price_book_for(start=at - timedelta(hours=1), end=at)
    out = {}
    for pool in pools:
        price = book.at(pool.gpu_model_id, "", at - timedelta(hours=1))
        out[pool.pk] = price.price_per_hour if price else Decimal(0)
    return out


def replay_processes() -> int:
    """How many replays run at once: WHATIF_PROCESSES, else one per core this process has."""
    return settings.WHATIF_PROCESSES or usable_cpus()


def whatif_compute(*, days: int, proposal: dict, now: datetime | None = None) -> dict:
    """Both scenarios' figures for the window of `days` ending now."""
    end = now or timezone.now()
    start = end - timedelta(days=days)
    hours = days * 24
    horizon = (end - start).total_seconds()
    history = window_jobs(start=start, end=end)
    pools = {p.pk: p for p in NodePool.objects.select_related("cluster")}
    today_quotas = {
        (q.team_id, q.pool_id): (q.nominal_gpus, q.borrowing_limit, q.lending_limit)
        for q in Quota.objects.all()
    }
    today_sizes = {pk: pool_capacity(pool=p)["capacity"] for pk, p in pools.items()}
    proposed_quotas = dict(today_quotas)
    for q in proposal.get("quotas", []):
        proposed_quotas[(q["team"], q["pool"])] = (
            q["nominal_gpus"],
            q["borrowing_limit"],
            q["lending_limit"],
        )
    proposed_sizes = dict(today_sizes)
    for p in proposal.get("pool_sizes", []):
        proposed_sizes[p["pool"]] = p["gpus"]
    tier_values = {t["tier"]: t["value"] for t in proposal.get("tiers", [])}
    weights = {w["team"]: Decimal(w["weight"]) for w in proposal.get("weights", [])}
    shared = {m["team"]: m["enabled"] for m in proposal.get("member_fair_sharing", [])}
    departments = {d["department"]: (d["shares_with_organisation"], d["weight"])
                   for d in proposal.get("departments", [])}  # fmt: skip
    sharing_today = set(Team.objects.filter(member_fair_sharing=True).values_list("pk", flat=True))
    sharing_proposed = (sharing_today - {t for t, on in shared.items() if not on}) | {
        t for t, on in shared.items() if on
    }
    member_teams = sharing_today | sharing_proposed
    clusters = Cluster.objects.filter(scheduler=Cluster.Scheduler.KUEUE, deleted_at__isnull=True)
    fair_on = clusters_with_fair_sharing()
    fair_today = {c.pk: c.pk in fair_on for c in clusters}
    fair_proposed = {c.pk: proposal.get("fair_sharing", fair_today[c.pk]) for c in clusters}
    prices = _prices(pools.values(), end)
    carried = sum(1 for job in history if job.carried)
    out = {"window_start": start.isoformat(), "window_end": end.isoformat(),
           "jobs": len(history) - carried, "carried_over": carried}  # fmt: skip
    scenarios = (
        ("today", today_quotas, today_sizes, {}, {}, fair_today, {}, sharing_today, {}),
        ("proposal", proposed_quotas, proposed_sizes, tier_values, weights, fair_proposed, shared,
         sharing_proposed, departments),
    )  # fmt: skip
    # Every scenario of every cluster is read first, then all are replayed, side by side where
    # there are cores for it (they are independent).
    setups = [
        (label, _scenario(
            cluster=cluster, quotas=quotas, sizes=sizes, tier_values=tiers,
            history=history, start=start, end=end, weights=team_weights,
            fair_sharing=fair[cluster.pk], shared=team_shared, departments=depts,
        ))
        for label, quotas, sizes, tiers, team_weights, fair, team_shared, _, depts in scenarios
        for cluster in clusters
    ]  # fmt: skip
    results = replay_all([run for _, (_, _, run) in setups], processes=replay_processes())
    replayed = {}
    for label, quotas, sizes, _, _, fair, _, sharing, _ in scenarios:
        runs, busy = [], {}
        for (of, (cluster_runs, cluster_pools, _)), result in zip(setups, results, strict=True):
            if of == label:
                runs += cluster_runs
                busy.update({pk: result.busy_gpu_seconds.get(p.name, 0.0)
                             for pk, p in cluster_pools.items()})  # fmt: skip
        by_name = {p.name: p for p in pools.values()}
        out[label] = scenario_figures(
            runs=runs, busy=busy, quotas=quotas, sizes=sizes, pools=by_name, prices=prices,
            hours=hours, horizon=horizon, end=end, member_teams=member_teams, sharing=sharing,
        )  # fmt: skip
        out[label]["fair_sharing"] = any(fair.values())
        replayed[label] = runs
    out["reservations"] = [
        row for cluster in clusters
        for row in reservations_replayed(reservation_phases(cluster=cluster, start=start, end=end))
    ]  # fmt: skip
    names = dict(Team.objects.values_list("pk", "name"))
    out["agreement"] = agreement(figures=out["today"], runs=replayed["today"], start=start,
                                 end=end, team_names=names)  # fmt: skip
    return out
