"""Fair sharing as the teams see it: weights, the shares Kueue reports, and decayed usage."""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from django.conf import settings
from django.core.cache import cache
from django.db.models import Q
from django.utils import timezone

from queues.manifests.quotas import OWNER_TEAM, fair_share_weight_text
from queues.models import Job, ManagedObject, Team

# Runs older than this many half-lives weigh under 0.4 % of their GPU-hours: left out, and
# none older than ten years whatever the half-life.
HALF_LIVES_KEPT = 8
HORIZON_MAX = timedelta(days=3650)
DECAYED_CACHE_SECONDS = 300


def decayed_gpu_hours(
    *, teams, now: datetime | None = None, half_life_hours: float | None = None
) -> dict[int, float]:
    """{team_id: GPU-hours its jobs held, each hour weighted 0.5 ** (age / half-life)}.

    Usage memory as in Kueue's admission fair sharing: a job that ran a week ago counts half
    as much as one running now (with the default half-life of 168 h). A run is the job's time
    from start (else admission) to finish, or to now while it runs."""
    now = now or timezone.now()
    half_life = float(half_life_hours or settings.FAIR_SHARE_HALF_LIFE_HOURS)
    horizon = now - min(HORIZON_MAX, timedelta(hours=min(half_life * HALF_LIVES_KEPT, 1e8)))
    out = {team.pk if isinstance(team, Team) else team: 0.0 for team in teams}
    rows = (
        Job.objects.filter(team_id__in=list(out))
        .filter(Q(started_at__isnull=False) | Q(admitted_at__isnull=False))
        .filter(Q(finished_at__isnull=True) | Q(finished_at__gt=horizon))
        .values_list("team_id", "started_at", "admitted_at", "finished_at", "workers",
                     "gpus_per_worker")
        .iterator(chunk_size=5000)
    )  # fmt: skip
    rate = math.log(2) / half_life  # per hour
    for team_id, started, admitted, finished, workers, per_worker in rows:
        start = max(started or admitted, horizon)
        end = min(finished or now, now)
        if end <= start:
            continue
        # The integral of 2 ** (-(now - t) / half-life) over the run, in hours.
        age_end = (now - end).total_seconds() / 3600
        age_start = (now - start).total_seconds() / 3600
        weight = (math.exp(-rate * age_end) - math.exp(-rate * age_start)) / rate
        out[team_id] += workers * per_worker * weight
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


def weighted_shares(*, teams) -> dict[int, list[dict]]:
    """{team_id: [{cluster, share}]}: the weightedShare each cluster's Kueue last reported for
    the team's ClusterQueue (only where Kueue runs with fair sharing on)."""
    ids = [team.pk if isinstance(team, Team) else team for team in teams]
    out: dict[int, list[dict]] = {pk: [] for pk in ids}
    rows = (
        ManagedObject.objects.filter(kind="ClusterQueue", owner_type=OWNER_TEAM, owner_id__in=ids)
        .filter(cluster__deleted_at__isnull=True)
        .select_related("cluster")
    )
    for row in rows:
        fair = (row.live_status or {}).get("fairSharing")
        if isinstance(fair, dict) and "weightedShare" in fair:
            out[row.owner_id].append({"cluster": row.cluster.name, "share": fair["weightedShare"]})
    return out


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
