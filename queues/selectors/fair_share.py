"""Fair sharing as the teams see it: weights, the shares Kueue reports, and decayed usage; and
within a team, how its queue is shared among its members."""

from __future__ import annotations

import math
from collections import defaultdict
from datetime import datetime, timedelta

from django.conf import settings
from django.core.cache import cache
from django.db.models import Count, Exists, Q
from django.utils import timezone

from fleet.models import NodePool
from fleet.quantities import quantity_float
from queues.manifests.quotas import (
    OWNER_DEPARTMENT,
    OWNER_TEAM,
    fair_share_weight_text,
    member_queue_name,
)
from queues.models import Department, Job, ManagedObject, Membership, Quota, Team
from queues.selectors.quotas import gpus_in_use

# Runs older than this many half-lives weigh under 0.4 % of their GPU-hours: left out, and
# none older than ten years whatever the half-life.
HALF_LIVES_KEPT = 8
HORIZON_MAX = timedelta(days=3650)
DECAYED_CACHE_SECONDS = 300
WAITING = (Job.State.SUBMITTED, Job.State.QUEUED, Job.State.PREEMPTED)


def decayed_gpu_hours(
    *, teams, now: datetime | None = None, half_life_hours: float | None = None, by: str = "team"
) -> dict[int, float]:
    """{team_id: GPU-hours its jobs held, each hour weighted 0.5 ** (age / half-life)}; with
    `by="owner"`, {user id: the same for the jobs each member ran in these teams}.

    Usage memory as in Kueue's admission fair sharing: a job that ran a week ago counts half
    as much as one running now (with the default half-life of 168 h). A run is the job's time
    from start (else admission) to finish, or to now while it runs."""
    now = now or timezone.now()
    half_life = float(half_life_hours or settings.FAIR_SHARE_HALF_LIFE_HOURS)
    horizon = now - min(HORIZON_MAX, timedelta(hours=min(half_life * HALF_LIVES_KEPT, 1e8)))
    team_ids = [team.pk if isinstance(team, Team) else team for team in teams]
    out: dict[int, float] = dict.fromkeys(team_ids, 0.0) if by == "team" else {}
    rows = (
        Job.objects.filter(team_id__in=team_ids)
        .filter(Q(started_at__isnull=False) | Q(admitted_at__isnull=False))
        .filter(Q(finished_at__isnull=True) | Q(finished_at__gt=horizon))
        .values_list("team_id" if by == "team" else "owner_id", "started_at", "admitted_at",
                     "finished_at", "workers", "gpus_per_worker")
        .iterator(chunk_size=5000)
    )  # fmt: skip
    rate = math.log(2) / half_life  # per hour
    for key, started, admitted, finished, workers, per_worker in rows:
        start = max(started or admitted, horizon)
        end = min(finished or now, now)
        if end <= start:
            continue
        # The integral of 2 ** (-(now - t) / half-life) over the run, in hours.
        age_end = (now - end).total_seconds() / 3600
        age_start = (now - start).total_seconds() / 3600
        weight = (math.exp(-rate * age_end) - math.exp(-rate * age_start)) / rate
        out[key] = out.get(key, 0.0) + workers * per_worker * weight
    return out


def decayed_gpu_hours_cached(*, teams) -> dict[int, float]:
    """decayed_gpu_hours now, each team's figure kept for DECAYED_CACHE_SECONDS: it moves
    slowly (a week's half-life) and reads every run of the last weeks."""
    ids = [team.pk if isinstance(team, Team) else team for team in teams]
    keys = {pk: f"fair-share:decayed:{pk}" for pk in ids}
    found = cache.get_many(list(keys.values()))
    out = {pk: found[key] for pk, key in keys.items() if key in found}
    missing = [pk for pk in ids if pk not in out]
    if missing:
        fresh = decayed_gpu_hours(teams=missing)
        cache.set_many({keys[pk]: value for pk, value in fresh.items()}, DECAYED_CACHE_SECONDS)
        out.update(fresh)
    return out


def _reported_shares(kind: str, owner_type: str, ids: list[int]) -> dict[int, list[dict]]:
    """{owner id: [{cluster, share}]}: the weightedShare each cluster's Kueue last reported in
    the status of the owners' objects of that kind (by cluster name)."""
    out: dict[int, list[dict]] = {pk: [] for pk in ids}
    rows = (
        ManagedObject.objects.filter(kind=kind, owner_type=owner_type, owner_id__in=ids)
        .filter(cluster__deleted_at__isnull=True)
        .select_related("cluster")
        .order_by("cluster__name")
    )
    for row in rows:
        fair = (row.live_status or {}).get("fairSharing")
        if isinstance(fair, dict) and "weightedShare" in fair:
            out[row.owner_id].append({"cluster": row.cluster.name, "share": fair["weightedShare"]})
    return out


def weighted_shares(*, teams) -> dict[int, list[dict]]:
    """{team_id: [{cluster, share}]}: the weightedShare each cluster's Kueue last reported for
    the team's ClusterQueue (only where Kueue runs with fair sharing on)."""
    ids = [team.pk if isinstance(team, Team) else team for team in teams]
    return _reported_shares("ClusterQueue", OWNER_TEAM, ids)


def highest_share(shares: list[dict]) -> int | None:
    """A team's highest weighted share over its clusters (None: no cluster reports one)."""
    return max((s["share"] for s in shares), default=None)


def clusters_with_fair_sharing() -> set[int]:
    """Ids of the clusters whose Kueue runs with fair sharing: their ClusterQueues report a
    share."""
    return set(
        ManagedObject.objects.filter(kind="ClusterQueue", live_status__has_key="fairSharing")
        .values_list("cluster_id", flat=True)
        .distinct()
    )


def team_fair_share(*, team: Team, with_peers: bool = False) -> dict:
    """The team page's fair-sharing card: its weight, its shares per cluster and its decayed
    use; `with_peers` (for who may set the weights) the same for every team of its department."""
    teams = (
        list(Team.objects.filter(department_id=team.department_id).order_by("name"))
        if with_peers
        else [team]
    )
    shares = weighted_shares(teams=teams)
    usage = decayed_gpu_hours_cached(teams=teams)
    peers = [
        {
            "team": peer,
            "weight_text": fair_share_weight_text(peer.fair_share_weight),
            "shares": shares[peer.pk],
            "share": highest_share(shares[peer.pk]),
            "decayed_gpu_hours": usage[peer.pk],
        }
        for peer in teams
    ]
    mine = next(p for p in peers if p["team"].pk == team.pk)
    return {
        **mine,
        "enabled": bool(mine["shares"]),
        "half_life_hours": settings.FAIR_SHARE_HALF_LIFE_HOURS,
        "peers": peers if with_peers else [],
    }


# -- member fair sharing (Kueue's admission fair sharing among a team's members) ------------------


def consumed_gpus(status: dict | None) -> float | None:
    """The GPUs a LocalQueue's status says it consumed (Kueue's decayed average of what it
    held: GPUs and GPU slices, not cpu or memory); None where it reports no usage memory."""
    afs = ((status or {}).get("fairSharing") or {}).get("admissionFairSharingStatus")
    if not isinstance(afs, dict):
        return None
    total = 0.0
    for resource, value in (afs.get("consumedResources") or {}).items():
        if not str(resource).startswith("nvidia.com/"):
            continue
        total += quantity_float(value) or 0.0
    return total


def team_member_fair_share(*, team: Team) -> dict:
    """How the team shares its queue among its members, as its page and the API show it: per
    member their own LocalQueue, weight, the GPUs Kueue remembers they consumed (over the
    clusters that report it), that divided by the weight (the lower, the sooner Kueue serves
    them), the decayed GPU-hours the portal counts, and their jobs waiting now; the members in
    the order Kueue serves them."""
    memberships = list(Membership.objects.filter(team=team).select_related("user"))
    queues = {member_queue_name(team, m.user): m for m in memberships}
    statuses: dict[str, list] = {name: [] for name in queues}
    rows = ManagedObject.objects.filter(
        kind="LocalQueue", owner_type=OWNER_TEAM, owner_id=team.pk, name__in=list(queues),
        cluster__deleted_at__isnull=True,
    ).values_list("name", "live_status")  # fmt: skip
    for name, status in rows:
        consumed = consumed_gpus(status)
        if consumed is not None:
            statuses[name].append(consumed)
    hours = decayed_gpu_hours_cached_by_owner(team=team)
    waiting = dict(
        Job.objects.filter(team=team, state__in=WAITING).exclude(local_queue="")
        .order_by().values("owner_id").annotate(n=Count("id")).values_list("owner_id", "n")
    )  # fmt: skip
    members = []
    for name, m in queues.items():
        consumed = sum(statuses[name]) if statuses[name] else None
        weight = float(m.fair_share_weight)
        usage = None if consumed is None else (consumed / weight if weight > 0 else math.inf)
        members.append({
            "user": m.user, "username": m.user.username, "queue": name,
            "weight": m.fair_share_weight,
            "weight_text": fair_share_weight_text(m.fair_share_weight),
            "consumed_gpus": consumed, "usage": usage,
            "decayed_gpu_hours": hours.get(m.user_id, 0.0), "waiting": waiting.get(m.user_id, 0),
        })  # fmt: skip
    members.sort(key=lambda r: (r["usage"] is None, r["usage"] or 0.0, r["username"]))
    return {
        "enabled": team.member_fair_sharing,
        "reported": any(r["consumed_gpus"] is not None for r in members),
        "half_life_hours": settings.FAIR_SHARE_HALF_LIFE_HOURS,
        "members": members,
    }


def decayed_gpu_hours_cached_by_owner(*, team: Team) -> dict[int, float]:
    """decayed_gpu_hours per member of the team, kept DECAYED_CACHE_SECONDS as the team's."""
    key = f"fair-share:decayed-members:{team.pk}"
    found = cache.get(key)
    if found is None:
        found = decayed_gpu_hours(teams=[team], by="owner")
        cache.set(key, found, DECAYED_CACHE_SECONDS)
    return found


# -- departments sharing across the organisation (a tree of Kueue Cohorts) -------------------------


def department_weighted_shares(*, departments) -> dict[int, list[dict]]:
    """{department_id: [{cluster, share}]}: the weightedShare each cluster's Kueue last reported
    for the department's Cohort (only where fair sharing is on and the Cohort has a parent)."""
    ids = [d.pk if isinstance(d, Department) else d for d in departments]
    return _reported_shares("Cohort", OWNER_DEPARTMENT, ids)


def lending_teams(department_id: int | None, prefix: str = "") -> Q:
    """A filter on teams (`prefix`: the path to the team, e.g. "team__") for those that lend
    to and borrow from the teams of this department: its own, and when it shares with the
    organisation those of every other department that does. One query, whatever it is asked
    with."""
    shares = Department.objects.filter(pk=department_id, shares_with_organisation=True)
    return Q(**{f"{prefix}department_id": department_id}) | (
        Exists(shares) & Q(**{f"{prefix}department__shares_with_organisation": True})
    )


def department_sharing(*, departments) -> list[dict]:
    """Per department, as the departments page and the API show it: whether it shares idle GPUs
    with the organisation, its weight, the share each cluster reports for its Cohort, and per
    pool its teams' quota, the GPUs they hold, and what of that is beyond the department's own
    quota (borrowed from other departments)."""
    departments = list(departments)
    shares = department_weighted_shares(departments=departments)
    quotas = Quota.objects.filter(team__department__in=departments).select_related(
        "team", "pool__cluster"
    )
    nominal: dict[tuple[int, int], int] = defaultdict(int)
    pools = {}
    for q in quotas:
        nominal[(q.team.department_id, q.pool_id)] += q.nominal_gpus
        pools[q.pool_id] = q.pool
    department_of = dict(
        Team.objects.filter(department__in=departments).values_list("pk", "department_id")
    )
    used: dict[tuple[int, int], int] = defaultdict(int)
    for (team_id, pool_id), gpus in gpus_in_use(teams=list(department_of)).items():
        used[(department_of[team_id], pool_id)] += gpus
        if pool_id not in pools:
            pools[pool_id] = None
    missing = [pk for pk, pool in pools.items() if pool is None]
    pools.update(NodePool.objects.select_related("cluster").in_bulk(missing))
    out = []
    for d in departments:
        rows = []
        for pool_id in sorted(pools, key=lambda pk: (pools[pk].cluster.name, pools[pk].name)):
            quota, held = nominal.get((d.pk, pool_id), 0), used.get((d.pk, pool_id), 0)
            if quota or held:
                rows.append({"pool": pools[pool_id], "nominal_gpus": quota, "in_use": held,
                             "beyond_quota": max(0, held - quota)})  # fmt: skip
        out.append({
            "department": d, "shares_with_organisation": d.shares_with_organisation,
            "weight": d.fair_share_weight,
            "weight_text": fair_share_weight_text(d.fair_share_weight), "shares": shares[d.pk],
            "share": highest_share(shares[d.pk]), "pools": rows,
        })  # fmt: skip
    return out
