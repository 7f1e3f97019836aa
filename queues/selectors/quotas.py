"""Reads for quota governance: who sees which requests, quotas and audit events; quota figures.

"In use" is computed from Job rows (admitted or running, by the pool they were admitted to, else
the pool they asked for): the database is kept current by the job status sync, so pages never
call Kubernetes.
"""

from __future__ import annotations

from collections import defaultdict

from django.db.models import QuerySet, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

from core.roles import is_platform_admin, sees_everything
from fleet.models import Node, NodePool
from fleet.selectors import prices
from fleet.selectors.inventory import pool_stats
from queues.models import (
    Job,
    Membership,
    Quota,
    QuotaRequest,
    Team,
)
from queues.selectors.approvers import quota_requests_awaiting_decision
from queues.selectors.tenancy import team_list

IN_USE_STATES = ("admitted", "running")


# -- who may do what ---------------------------------------------------------------------------


def user_can_request(*, user, team: Team) -> bool:
    """Members and leads of the team (and platform admins) may ask for its quota."""
    if not user.is_authenticated:
        return False
    return is_platform_admin(user) or Membership.objects.filter(user=user, team=team).exists()


# -- lists -------------------------------------------------------------------------------------


def quota_request_list(*, user) -> QuerySet[QuotaRequest]:
    """Requests of the teams the user sees (own teams; the department's for managers)."""
    qs = QuotaRequest.objects.select_related(
        "team__department", "pool__gpu_model", "pool__cluster", "requested_by", "decided_by"
    )
    if sees_everything(user):
        return qs
    return qs.filter(team__in=team_list(user=user))


def quota_request_get(*, user, pk: int) -> QuotaRequest:
    """One visible request; raises QuotaRequest.DoesNotExist otherwise (so 404)."""
    return quota_request_list(user=user).get(pk=pk)


def decision_queue(*, user) -> QuerySet[QuotaRequest]:
    """Pending requests the user may decide, oldest first (never their own)."""
    return quota_requests_awaiting_decision(user=user)


def quota_list(*, user) -> QuerySet[Quota]:
    """Quotas of the teams the user sees."""
    qs = Quota.objects.select_related("team__department", "pool__gpu_model", "pool__cluster")
    if sees_everything(user):
        return qs
    return qs.filter(team__in=team_list(user=user))


# -- figures -----------------------------------------------------------------------------------


def pool_capacity(*, pool: NodePool, exclude_team: Team | None = None) -> dict:
    """GPUs in the pool's nodes, nominal quota granted (to other teams), and what is left."""
    capacity = Node.objects.filter(pool=pool).aggregate(n=Sum("gpu_capacity"))["n"] or 0
    granted_qs = Quota.objects.filter(pool=pool)
    if exclude_team is not None:
        granted_qs = granted_qs.exclude(team=exclude_team)
    granted = granted_qs.aggregate(n=Sum("nominal_gpus"))["n"] or 0
    return {
        "capacity": capacity,
        "granted": granted,
        "left": capacity - granted,
        "oversubscription_allowed": pool.allow_oversubscription,
    }


def gpus_in_use(*, teams=None, pools=None) -> dict[tuple[int, int], int]:
    """{(team_id, pool_id): GPUs held by admitted or running jobs}."""
    qs = Job.objects.filter(state__in=IN_USE_STATES).annotate(
        used_pool=Coalesce("admitted_pool_id", "pool_id")
    )
    if teams is not None:
        qs = qs.filter(team__in=teams)
    if pools is not None:
        qs = qs.filter(used_pool__in=[p if isinstance(p, int) else p.pk for p in pools])
    out: dict[tuple[int, int], int] = defaultdict(int)
    for team_id, pool_id, workers, per_worker in qs.values_list(
        "team_id", "used_pool", "workers", "gpus_per_worker"
    ):
        if pool_id is not None:
            out[(team_id, pool_id)] += workers * per_worker
    return out


def _usage_row(pool: NodePool, quota: Quota | None, in_use: int) -> dict:
    nominal = quota.nominal_gpus if quota else 0
    return {
        "pool": pool,
        "quota": quota,
        "nominal_gpus": nominal,
        "borrowing_limit": quota.borrowing_limit if quota else None,
        "lending_limit": quota.lending_limit if quota else None,
        "ends_at": quota.ends_at if quota else None,
        "base_nominal_gpus": quota.base_nominal_gpus if quota else None,
        "in_use": in_use,
        "borrowed": max(0, in_use - nominal),
    }


def quota_usage(*, team: Team, pool: NodePool | None = None) -> list[dict]:
    """Per pool where the team has quota (or the given pool): quota figures and GPUs in use."""
    if pool is None:
        return quota_usage_by_team(teams=[team])[team.pk]
    quota = Quota.objects.filter(team=team, pool=pool).first()
    used = gpus_in_use(teams=[team], pools=[pool])
    return [_usage_row(pool, quota, used.get((team.pk, pool.pk), 0))]


def quota_usage_by_team(*, teams) -> dict[int, list[dict]]:
    """{team_id: quota_usage rows of each pool where the team has quota}, in two queries."""
    teams = list(teams)
    rows: dict[int, list[dict]] = {team.pk: [] for team in teams}
    quotas = Quota.objects.filter(team__in=teams).select_related("pool__gpu_model", "pool__cluster")
    used = gpus_in_use(teams=teams)
    for quota in quotas:
        in_use = used.get((quota.team_id, quota.pool_id), 0)
        rows[quota.team_id].append(_usage_row(quota.pool, quota, in_use))
    return rows


def quota_granted_by_pool() -> dict[int, int]:
    """{pool_id: nominal GPUs granted to all teams} for pools with any quota."""
    return dict(
        Quota.objects.values("pool_id").annotate(n=Sum("nominal_gpus")).values_list("pool_id", "n")
    )


def pool_rows_for_team(*, team: Team) -> list[dict]:
    """Every pool with the team's quota and use, capacity left and the price of one GPU-month.

    The request form's table: a fixed number of queries however many pools there are.
    """
    pools = list(
        NodePool.objects.filter(cluster__deleted_at__isnull=True)
        .select_related("gpu_model", "cluster")
        .order_by("name")
    )
    stats = pool_stats(pools=pools)
    granted = quota_granted_by_pool()
    nominal = dict(Quota.objects.filter(team=team).values_list("pool_id", "nominal_gpus"))
    used = gpus_in_use(teams=[team])
    now = timezone.now()
    price_by_model: dict[int, tuple | None] = {}
    rows = []
    for pool in pools:
        if pool.gpu_model_id not in price_by_model:
            price_by_model[pool.gpu_model_id] = prices.monthly_price(
                gpu_model=pool.gpu_model_id, gpus=1, at=now
            )
        price = price_by_model[pool.gpu_model_id]
        pool_gpus = stats[pool.pk]["gpus_total"]
        pool_granted = granted.get(pool.pk) or 0
        rows.append(
            {
                "pool": pool,
                "usage": {
                    "nominal_gpus": nominal.get(pool.pk, 0),
                    "in_use": used.get((team.pk, pool.pk), 0),
                },
                # One definition of "left" everywhere (pool_capacity with the team excluded):
                # the pool's GPUs less the other teams' quota, the most this team's can be.
                "capacity": {
                    "capacity": pool_gpus,
                    "granted": pool_granted,
                    "left": pool_gpus - (pool_granted - nominal.get(pool.pk, 0)),
                    "oversubscription_allowed": pool.allow_oversubscription,
                },
                "monthly_price": price[0] if price else None,
                "currency": price[1] if price else "",
            }
        )
    return rows


def quota_request_figures(*, request_or_team, pool: NodePool, nominal_gpus: int | None = None):
    """What the form and the decision page show: current quota and use, capacity left, price."""
    team = request_or_team if isinstance(request_or_team, Team) else request_or_team.team
    usage = quota_usage(team=team, pool=pool)[0]
    capacity = pool_capacity(pool=pool, exclude_team=team)
    figures = {
        "usage": usage,
        "capacity": capacity,
        # What other teams leave: the most the team's quota can be (the form's table too).
        "left_for_team": capacity["left"],
        "monthly_price": None,
        "monthly_price_change": None,
        "currency": "",
    }
    if nominal_gpus is not None:
        now = timezone.now()
        total = prices.monthly_price(gpu_model=pool.gpu_model_id, gpus=nominal_gpus, at=now)
        change = prices.monthly_price(
            gpu_model=pool.gpu_model_id, gpus=nominal_gpus - usage["nominal_gpus"], at=now
        )
        if total is not None:
            figures["monthly_price"], figures["currency"] = total
        if change is not None:
            figures["monthly_price_change"] = change[0]
    return figures


def quota_request_queue_names(quota_request) -> tuple[str, str]:
    """The team queue objects that carry a request's quota into its cluster: the team's queue
    (Kueue's ClusterQueue, Volcano's team Queue) and, on Volcano, the pool's leaf Queue (a name
    a Kueue cluster has no object of)."""
    from queues.manifests.quotas import cluster_queue_name, volcano_pool_queue_name

    team, pool = quota_request.team, quota_request.pool
    return cluster_queue_name(team), volcano_pool_queue_name(team, pool)


def quota_requests_apply_waits(quota_requests) -> dict[int, str]:
    """quota_request_apply_wait for many requests at once (a list page or API page): the queue
    objects and the broker's kept messages are read in one query each."""
    from core.selectors import unsent_since
    from queues.manifests.quotas import OWNER_TEAM
    from queues.models import ManagedObject

    waiting = [
        r for r in quota_requests if r.state == "approved" and r.awaiting_generation is not None
    ]
    if not waiting:
        return {}
    rows = ManagedObject.objects.filter(
        cluster_id__in={r.pool.cluster_id for r in waiting}, owner_type=OWNER_TEAM,
        owner_id__in={r.team_id for r in waiting}, kind__in=("ClusterQueue", "Queue"),
        namespace="",
    ).only(
        "cluster_id", "name", "last_error", "last_error_at", "attempts", "applied_generation",
        "desired_generation", "pk",
    )  # fmt: skip
    by_name = {(row.cluster_id, row.name): row for row in rows}
    kept = unsent_since(name="queues.reconcile_cluster")
    kept_objects = unsent_since(name="queues.apply_managed_object")
    waits = {}
    for request in waiting:
        carrying = [by_name.get((request.pool.cluster_id, name))
                    for name in quota_request_queue_names(request)]  # fmt: skip
        carrying = [row for row in carrying if row is not None]
        since = [kept.get((request.pool.cluster_id,))]
        since += [kept_objects.get((row.pk,)) for row in carrying]
        waits[request.pk] = _apply_wait_text(
            request.pool.cluster, carrying, min((t for t in since if t), default=None)
        )
    return waits


def quota_request_apply_wait(*, quota_request) -> str:
    """Why an approved request is not in the cluster yet, for its page and the API: the
    cluster (disabled, not answering), the message broker (down: the request to apply it is
    kept), or what the last try to apply the queue objects that carry it said, with the
    attempt."""
    return quota_requests_apply_waits([quota_request]).get(quota_request.pk, "")


def _apply_wait_text(cluster, carrying: list, kept_since) -> str:
    from core.selectors import unsent_wait_text
    from fleet.selectors.clusters import cluster_wait_reason

    if wait := cluster_wait_reason(cluster=cluster, waiting="the new quota"):
        return wait
    if kept_since is not None:
        return unsent_wait_text(kept_since, what="the request to apply the new quota")
    failing = [
        row for row in carrying
        if row.last_error and row.applied_generation < row.desired_generation
    ]  # fmt: skip
    if not failing:
        return ""
    row = max(failing, key=lambda r: r.last_error_at or timezone.now())
    when = timezone.localtime(row.last_error_at) if row.last_error_at else None
    at = f" at {when:%H:%M:%S}" if when else ""
    said = row.last_error.removeprefix("Will retry: ")
    return (
        f"Cluster {cluster.name} did not take the new quota yet (attempt {row.attempts}{at}: "
        f"{said[:300]}); retrying."
    )
