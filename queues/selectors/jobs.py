"""Reads for jobs: who sees which jobs, pools a team may use, capacity limits, why pending."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db.models import Exists, F, Max, OuterRef, Prefetch, Q, QuerySet, Sum
from django.utils import timezone

from core.text import count
from fleet.models import Cluster, Node, NodePool
from kueuemodel.estimate import Forecast, Holding
from kueuemodel.resources import GPU
from queues.manifests.jobs import JOBSET_DRIVER
from queues.manifests.quotas import fair_share_weight_text
from queues.manifests.reservations import quota_rows_with_reservations
from queues.models import (
    ApprovalPolicy,
    Department,
    Job,
    JobPod,
    ManagedObject,
    Membership,
    Quota,
    Reservation,
    Team,
)
from queues.selectors.fair_share import (
    clusters_with_fair_sharing,
    consumed_gpus,
    department_weighted_shares,
    highest_share,
    lending_teams,
    weighted_shares,
)
from queues.selectors.quotas import IN_USE_STATES, gpus_in_use
from queues.selectors.tenancy import team_hold_text, team_ids_visible

WAITING_STATES = ("submitted", "queued", "preempted")


def job_list(*, user) -> QuerySet[Job]:
    """Jobs of the teams the user may see, with what list pages show.

    The visible teams are read first (a handful of ids) rather than joined in as a subquery:
    with a million jobs, planning the join cost more than running it."""
    jobs = Job.objects.select_related("team", "owner", "pool", "tier", "admitted_pool", "cluster")
    visible = team_ids_visible(user=user)
    return jobs if visible is None else jobs.filter(team_id__in=visible)


# What a row of a job list shows (queues/templatetags/job_rows.py), read as plain named tuples:
# fifty rows built as six model instances each cost more than the page's query.
LIST_FIELDS = (
    "pk", "name", "state", "workers", "gpus_per_worker", "queue_position", "created_at",
    "team__name", "owner__username", "pool__name", "admitted_pool__name", "tier__name",
)  # fmt: skip


def job_list_rows(*, user) -> QuerySet:
    """job_list with only what list pages show, as named tuples (fields LIST_FIELDS)."""
    return job_list(user=user).select_related(None).values_list(*LIST_FIELDS, named=True)


def job_get(*, user, pk) -> Job:
    """One visible job; raises Job.DoesNotExist for other teams' jobs (so 404)."""
    return job_list(user=user).get(pk=pk)


def job_detail(*, user, pk) -> Job:
    """One visible job with its pods and transitions, and the relations its page reads (not
    the admitted pool: a wide join costs the page more to compile than to run). The pods come
    without the log tail kept when each ended (up to JOB_LOG_KEEP_LINES lines): the page shows
    logs through its own request."""
    pods = Prefetch("pods", queryset=JobPod.objects.defer("log_tail"))
    return (
        job_list(user=user)
        .select_related(None)
        .select_related("team", "owner", "pool", "tier", "cluster")
        .prefetch_related(pods, "transitions")
        .get(pk=pk)
    )


def team_job_pools(*, team: Team) -> QuerySet[NodePool]:
    """Pools the team may run jobs in: those where its own quota grants GPUs, and those where
    the window of one of its reservations is open."""
    granted = Quota.objects.filter(Quota.GRANTS_GPUS, team=team).values("pool_id")
    reserved = Reservation.objects.filter(team=team, state=Reservation.State.ACTIVE)
    return (
        NodePool.objects.filter(
            Q(pk__in=granted) | Q(pk__in=reserved.values("pool_id")),
            cluster__deleted_at__isnull=True,
        )
        .select_related("cluster", "gpu_model")
        .order_by("name")
    )


def job_pools(*, team: Team, pool: NodePool | None) -> list[NodePool]:
    """The pools a job may run in: its own, or for "any pool" every pool of the team."""
    return [pool] if pool is not None else list(team_job_pools(team=team))


def job_cluster_id(*, team: Team, pool: NodePool | None, gpus: int | None = None) -> int | None:
    """The cluster a job runs on: its pool's. For "any pool", of the clusters where the team
    has quota, the one where a job of `gpus` GPUs would start soonest by the same estimate the
    job page shows (answering clusters first; the default, then the first by name, when they
    tie or `gpus` is not known); without quota, the default cluster (else any)."""
    if pool is not None:
        return pool.cluster_id
    pools = sorted(
        team_job_pools(team=team), key=lambda p: (not p.cluster.is_default, p.cluster.name)
    )
    if pools:
        if gpus is None or len({p.cluster_id for p in pools}) == 1:
            return pools[0].cluster_id
        return _soonest_cluster(team=team, pools=pools, gpus=gpus)
    live = Cluster.objects.filter(deleted_at__isnull=True)
    cluster = live.filter(is_default=True).first() or live.first()
    return cluster.pk if cluster is not None else None


def _soonest_cluster(*, team: Team, pools: list[NodePool], gpus: int) -> int:
    now = timezone.now()
    by_cluster: dict[int, list[NodePool]] = {}
    for pool in pools:
        by_cluster.setdefault(pool.cluster_id, []).append(pool)
    # GPUs of the team's jobs already waiting on each cluster go before this one.
    ahead = dict(
        Job.objects.filter(team=team, state__in=WAITING_STATES, cluster_id__in=list(by_cluster))
        .order_by()
        .values("cluster_id")
        .annotate(gpus=Sum(F("workers") * F("gpus_per_worker")))
        .values_list("cluster_id", "gpus")
    )
    best, best_key = None, None
    for cluster_id, cluster_pools in by_cluster.items():
        cluster = cluster_pools[0].cluster
        if not cluster.enabled:
            continue
        at, _ = start_estimator(team=team, pools=cluster_pools, now=now)(
            gpus=gpus, ahead=ahead.get(cluster_id) or 0
        )
        key = (cluster.unreachable_since is not None, at is None, at or now)
        if best_key is None or key < best_key:
            best, best_key = cluster_id, key
    return best if best is not None else pools[0].cluster_id


def job_volcano_pool(*, team: Team, cluster_id: int, gpus: int) -> NodePool | None:
    """The pool an "any pool" job takes on a Volcano cluster, where a job waits in the queue of
    one pool: of the team's pools there, the one with the most room left under the team's
    ceiling (the first by name when none has room for the job now)."""
    pools = [p for p in team_job_pools(team=team) if p.cluster_id == cluster_id]
    if not pools:
        return None
    limits = pool_limits(team=team, pools=pools)
    used = team_pool_usage(team=team)
    room = {p.pk: limits[p.pk]["ceiling"] - used.get(p.pk, 0) for p in pools}
    fits = [p for p in pools if room[p.pk] >= gpus]
    return max(fits, key=lambda p: room[p.pk]) if fits else pools[0]


QUOTA_FIELDS = ("team_id", "pool_id", "nominal_gpus", "borrowing_limit", "lending_limit")


def pool_limits(*, team: Team, pools, quotas=None) -> dict[int, dict]:
    """Per pool: the team's nominal quota, what it may borrow, the ceiling, the largest node.
    `quotas`: the department's quota rows in those pools (QUOTA_FIELDS), if already read."""
    pools = list(pools)
    if quotas is None:
        # Only the teams of the department (its cohort) lend, and those of the other departments
        # that share with the organisation when it does; no default ordering, which would join.
        quotas = quota_rows_with_reservations(
            list(
                Quota.objects.filter(lending_teams(team.department_id, "team__"), pool__in=pools)
                .order_by()
                .values(*QUOTA_FIELDS)
            ),
            reservations_open(team=team, pools=pools),
        )
    mine: dict[int, dict] = {}
    lendable: dict[int, int] = {}
    for q in quotas:
        if q["team_id"] == team.pk:
            mine[q["pool_id"]] = q
        else:
            lend = q["nominal_gpus"] if q["lending_limit"] is None else q["lending_limit"]
            lendable[q["pool_id"]] = lendable.get(q["pool_id"], 0) + lend
    nodes = {
        row["pool"]: row
        for row in Node.objects.filter(pool__in=pools)
        .order_by()
        .values("pool")
        .annotate(largest=Max("gpu_allocatable"), total=Sum("gpu_allocatable"))
    }
    out = {}
    for pool in pools:
        q = mine.get(pool.pk)
        nominal = q["nominal_gpus"] if q else 0
        others = lendable.get(pool.pk, 0)
        if q is None:
            borrow = 0
        elif q["borrowing_limit"] is None:
            borrow = others
        else:
            borrow = min(q["borrowing_limit"], others)
        node = nodes.get(pool.pk) or {}
        out[pool.pk] = {
            "pool": pool,
            "nominal": nominal,
            "borrow": borrow,
            "borrowing_limit": q["borrowing_limit"] if q else 0,
            "lendable_in_cohort": others,
            "ceiling": nominal + borrow,
            "largest_node": node.get("largest"),
            "pool_total": node.get("total"),
        }
    return out


def team_pool_limits(*, team: Team, name: str) -> dict | None:
    """pool_limits of the team's pool of that name, or None when the team may not run jobs
    there (see team_job_pools). The department's quota rows in the pool are read with the pool,
    so finding the pool and reading who lends what in it are one query."""
    rows = list(
        Quota.objects.filter(lending_teams(team.department_id, "team__"), pool__name=name)
        .select_related("pool")
        .order_by()
    )
    mine = next((q for q in rows if q.team_id == team.pk and q.grants_gpus()), None)
    reserved = reservations_open(team=team, pool_name=name)
    pool = mine.pool if mine is not None else None
    if pool is None:
        # No quota of its own there, but a reservation whose window is open: a quota for it.
        active = [r for r in reserved if r.team_id == team.pk and r.state == "active"]
        pool = active[0].pool if active else None
        if pool is None:
            return None
    quotas = [{f: getattr(q, f) for f in QUOTA_FIELDS} for q in rows if q.pool_id == pool.pk]
    quotas = quota_rows_with_reservations(quotas, [r for r in reserved if r.pool_id == pool.pk])
    return pool_limits(team=team, pools=[pool], quotas=quotas)[pool.pk]


def reservations_open(*, team: Team, pools=None, pool_name: str | None = None) -> list:
    """Reservations in force (lead time or window) of the teams that share quota with the
    team's, in these pools (or the pool of that name)."""
    qs = Reservation.objects.filter(
        lending_teams(team.department_id, "team__"),
        state__in=(Reservation.State.HOLDING, Reservation.State.ACTIVE),
    ).select_related("team__department", "pool")
    if pools is not None:
        qs = qs.filter(pool__in=pools)
    if pool_name is not None:
        qs = qs.filter(pool__name=pool_name)
    return list(qs.order_by("pk"))


def approval_policy_for_tier(*, tier) -> tuple[ApprovalPolicy | None, bool]:
    """The approval policy (None before anyone set one) and whether it holds jobs in `tier` for
    their lead: one query, rather than the policy with its whole tier list."""
    held = ApprovalPolicy.tiers_needing_approval.through.objects.filter(
        approvalpolicy_id=OuterRef("pk"), prioritytier_id=tier.pk
    )
    policies = ApprovalPolicy.objects.annotate(tier_held=Exists(held)).order_by("pk")[:1]
    policy = next(iter(policies), None)
    if policy is None:
        return None, False
    return policy, policy.tier_held


def job_capacity_problem(
    *,
    team: Team,
    pool: NodePool | None,
    workers: int,
    gpus_per_worker: int,
    pool_limit: dict | None = None,
) -> tuple[str, str] | None:
    """(field, message) when a job could never be admitted in any eligible pool, else None.
    `pool_limit`: the pool's entry of pool_limits, if already read."""
    total = workers * gpus_per_worker
    if total == 0:
        return None
    pools = job_pools(team=team, pool=pool)
    if not pools:
        return (
            "pool",
            "Your team has no GPU quota in any pool yet; ask your lead to request some.",
        )
    if pool_limit is not None and pool is not None:
        limits = {pool.pk: pool_limit}
    else:
        limits = pool_limits(team=team, pools=pools)
    problems = []
    for p in pools:
        lim = limits[p.pk]
        largest = lim["largest_node"]
        if largest is not None and gpus_per_worker > largest:
            problems.append(
                ("gpus_per_worker",
                 f"{count(gpus_per_worker, 'GPU')} per worker, but the largest node in "
                 f"{p.name} has {largest}")
            )  # fmt: skip
        elif total > lim["ceiling"]:
            problems.append(
                ("__all__",
                 f"{count(total, 'GPU')}, but your team can use at most {lim['ceiling']} in "
                 f"{p.name} ({lim['nominal']} quota + {lim['borrow']} it may borrow)")
            )  # fmt: skip
        else:
            return None
    field = problems[0][0] if all(f == problems[0][0] for f, _ in problems) else "__all__"
    return field, "This job could never start: it needs " + "; and ".join(
        m for _, m in problems
    ) + "."


# ----------------------------------------------------------------------------- why pending


def _gpus_text(need: int, pool: NodePool | None) -> str:
    """ "1 GPU", "8 A100-SXM4-80GB GPUs", "2 L4 MIG 1g.10gb instances"."""
    if pool is None:
        return count(need, "GPU")
    unit = pool.gpu_unit if need == 1 else f"{pool.gpu_unit}s"
    return f"{need} {pool.gpu_model.name if pool.gpu_model_id else pool.name} {unit}"


def team_pool_usage(*, team: Team) -> dict[int, int]:
    """GPUs the team's admitted and running jobs hold per pool."""
    return {pool_id: gpus for (_, pool_id), gpus in gpus_in_use(teams=[team]).items()}


def pending_reason_text(*, job: Job, message: str) -> str:
    """Plain-language why-pending from the Workload's message and the quota figures."""
    need = job.total_gpus
    pools = job_pools(team=job.team, pool=job.pool)
    if not pools:
        return f"Waiting for {count(need, 'GPU')}: your team has no quota in any pool."
    limits = pool_limits(team=job.team, pools=pools)
    usage = team_pool_usage(team=job.team)
    dept_usage = _department_usage(job.team, pools)
    lenders = (
        "the department and the organisation have"
        if job.team.department.shares_with_organisation
        else "the department has"
    )
    parts = []
    best_free = 0
    own_free = 0  # the most GPUs free within the team's own quota in one pool
    for p in pools:
        lim = limits[p.pk]
        used = usage.get(p.pk, 0)
        own_free = max(own_free, lim["nominal"] - used)
        idle = max(0, lim["lendable_in_cohort"] - dept_usage.get(p.pk, 0))
        # What the team may still borrow: its borrowing limit less what it borrows already.
        borrowed = max(0, used - lim["nominal"])
        room = idle
        if lim["borrowing_limit"] is not None:
            idle = min(idle, lim["borrowing_limit"])
            room = min(idle, max(0, lim["borrowing_limit"] - borrowed))
        best_free = max(best_free, max(0, lim["nominal"] - used) + room)
        part = (
            f"in {p.name} your team's quota is {lim['nominal']} ({used} in use) and "
            f"{lenders} {idle} idle to lend"
        )
        if borrowed:
            limit = lim["borrowing_limit"]
            part += f"; your team already borrows {borrowed}" + (
                f" of at most {limit}" if limit is not None else ""
            )
        parts.append(part)
    gpus = _gpus_text(need, pools[0] if len(pools) == 1 else None)
    text = f"Waiting for {gpus}: " + "; ".join(parts) + "."
    if best_free >= need:
        text += (
            f" {best_free} look free, so it waits its turn behind earlier or higher-priority jobs."
        )
    else:
        text += f" Only {best_free} of the {need} it needs are free now."
    if need > own_free:
        text += _fair_sharing_text(job.team)
    if job.local_queue and job.team.member_fair_sharing:
        text += _member_fair_sharing_text(job)
    lowered = message.lower()
    if "topology" in lowered and "fit only" in lowered and job.topology_level:
        where = (
            f"one {job.topology_level}"
            if job.topology_mode != Job.Placement.PREFERRED
            else f"as few {job.topology_level}s as possible"
        )
        text = (
            f"Waiting for room to place its {job.workers} workers within {where} of pool "
            f"{job.pool.name if job.pool_id else 'any'}: the quota allows it, but the GPUs free "
            f"now are spread too thinly. It starts when enough free up together."
        )
    if job.team.queue_hold_reason:
        text = team_hold_text(team=job.team) + " " + text
    elif "stopped" in lowered or "hold" in lowered:
        text = "Your team's queue is on hold: no job of the team starts until it is released. " + (
            text
        )
    elif "insufficient" not in lowered and any(
        word in lowered for word in ("untolerated taint", "affinity", "selector")
    ):
        text += " The cluster says the job's placement matches no pool it may use."
    if message:
        text += f" (Kueue: {message})"
    return text


def _fair_sharing_text(team: Team) -> str:
    """Why a job that must borrow may wait under Kueue's fair sharing ("" where it is off)."""
    peers = list(Team.objects.filter(department_id=team.department_id))
    shares = {pk: highest_share(rows) for pk, rows in weighted_shares(teams=peers).items()}
    if shares.get(team.pk) is None:
        return ""
    others = [shares[p.pk] for p in peers if p.pk != team.pk and shares[p.pk] is not None]
    text = (
        " It needs to borrow, and fair sharing decides who borrows: the department's idle GPUs "
        "go first to the team that borrows least for its weight, and a team above its fair "
        f"share may be preempted. Your team's weighted share is {shares[team.pk]} (weight "
        f"{fair_share_weight_text(team.fair_share_weight)})"
    )
    if others:  # other teams' figures, but not their names: those are theirs
        text += f"; the lowest of the department's other teams is {min(others)}"
    return text + "." + _organisation_sharing_text(team.department)


def _organisation_sharing_text(department) -> str:
    """Between departments that share with the organisation, fair sharing weighs departments
    too ("" for one that does not share, or where no cluster reports its share)."""
    if not department.shares_with_organisation:
        return ""
    sharing = list(Department.objects.filter(shares_with_organisation=True))
    shares = {pk: highest_share(rows)
              for pk, rows in department_weighted_shares(departments=sharing).items()}  # fmt: skip
    if shares.get(department.pk) is None:
        return ""
    text = (
        f" {department.name} shares idle GPUs with the organisation: between departments, they "
        "go first to the department that borrows least for its weight. Its weighted share is "
        f"{shares[department.pk]} (weight {fair_share_weight_text(department.fair_share_weight)})"
    )
    others = [v for pk, v in shares.items() if pk != department.pk and v is not None]
    if others:
        text += f"; the lowest of the other sharing departments is {min(others)}"
    return text + "."


def _member_fair_sharing_text(job: Job) -> str:
    """Why a job may wait behind teammates' under member fair sharing: Kueue serves first the
    member who used least lately. Teammates are counted, not named."""
    team = job.team
    weights = dict(Membership.objects.filter(team=team).values_list("user_id", "fair_share_weight"))
    rows = ManagedObject.objects.filter(
        kind="LocalQueue", owner_type="team", owner_id=team.pk, cluster_id=job.cluster_id
    ).values_list("name", "live_status")  # fmt: skip
    consumed = {name: consumed_gpus(status) for name, status in rows}
    mine = consumed.get(job.local_queue)
    weight = weights.get(job.owner_id, Decimal(1))
    text = (
        " Your team shares its queue fairly among its members: Kueue serves first the member "
        f"who used least lately (the GPUs each held, halved every "
        f"{settings.FAIR_SHARE_HALF_LIFE_HOURS:g} hours, divided by their weight)."
    )
    if mine is None:
        return text
    usage = mine / float(weight) if weight > 0 else math.inf
    waiting = (
        Job.objects.filter(team=team, cluster_id=job.cluster_id, state__in=WAITING_STATES)
        .exclude(local_queue__in=("", job.local_queue))
        .order_by()
        .values_list("local_queue", "owner_id")
        .distinct()
    )
    ahead = 0
    for queue, owner_id in waiting:
        theirs = consumed.get(queue)
        their_weight = float(weights.get(owner_id, Decimal(1)))
        if theirs is not None and (theirs / their_weight if their_weight > 0 else math.inf) < usage:
            ahead += 1
    text += (
        f" Your recent use counts {mine:.1f} GPUs (weight {fair_share_weight_text(weight)})"
        + (f"; {ahead} teammate{'s' if ahead != 1 else ''} waiting now used less." if ahead
           else ", no more than any teammate waiting now.")
    )  # fmt: skip
    return text


def _department_usage(team: Team, pools) -> dict[int, int]:
    """GPUs that the other teams it shares quota with (its department's, and those of the
    departments sharing with the organisation when its does) hold in these pools."""
    others = Team.objects.filter(lending_teams(team.department_id)).exclude(pk=team.pk)
    usage: dict[int, int] = {}
    for (_, pool_id), gpus in gpus_in_use(teams=others, pools=pools).items():
        usage[pool_id] = usage.get(pool_id, 0) + gpus
    return usage


def expected_end(now, since, runtime_seconds):
    """When a running job is expected to give its GPUs back: its start (or admission) plus its
    expected runtime (else its maximum), and not before `now`."""
    return max(now, (since or now) + timedelta(seconds=runtime_seconds))


def start_estimator(*, team: Team, pools, now):
    """A function (gpus, ahead) -> (estimated start, how it was made) for the team's jobs that
    wait in `pools`, asked of Kueue's rules (kueuemodel.estimate): per cluster, a small
    simulation of the ClusterQueues that share quota with the team's (their quotas in those
    pools, with Kueue's fair sharing where the cluster runs it) and the jobs running there,
    each giving its GPUs back at its expected end; the job and the `ahead` GPUs queued before it
    start when the model admits them together. The quotas and the running jobs are read once,
    so one estimator serves every waiting job of the team."""
    pools = list(pools)
    pool_ids = [p.pk for p in pools]
    quotas = list(
        Quota.objects.filter(lending_teams(team.department_id, "team__"), pool__in=pool_ids)
        .order_by()
        .values(
            *QUOTA_FIELDS, "pool__cluster_id", "team__fair_share_weight", "team__department_id",
            "team__department__shares_with_organisation", "team__department__fair_share_weight",
        )
    )  # fmt: skip
    # As the reservations in force change them: the reserving team's quota includes its
    # reserved GPUs in the window, and lends none of them; others see less to borrow.
    reserved = reservations_open(team=team, pools=pool_ids)
    quotas = quota_rows_with_reservations(quotas, reserved)
    # Said beside every estimate: the team's reservations whose window is open count.
    held = [r for r in reserved if r.team_id == team.pk and r.state == Reservation.State.ACTIVE]
    held_note = "".join(
        f" Your team's reservation of {count(r.gpus, 'GPU')} in {r.pool.name} (until "
        f"{r.ends_at:%Y-%m-%d %H:%M} UTC) counts in its quota."
        for r in held
    )
    running = list(
        Job.objects.filter(lending_teams(team.department_id, "team__"), state__in=IN_USE_STATES)
        .filter(
            Q(admitted_pool_id__in=pool_ids)
            | Q(admitted_pool__isnull=True, pool_id__in=pool_ids)
        )
        .order_by("admitted_at", "pk")  # as Kueue admitted them: preemption takes the newest
        .values_list(
            "team_id", "admitted_pool_id", "pool_id", "workers", "gpus_per_worker",
            "started_at", "admitted_at", "expected_runtime_seconds", "max_runtime_seconds",
        )
    )  # fmt: skip
    fair = clusters_with_fair_sharing()
    cluster_of = {p.pk: p.cluster_id for p in pools}
    ends_at: dict[float, object] = {}  # seconds from now -> the expected end they stand for
    holding: dict[int, list[Holding]] = {}
    for team_id, admitted_pool, pool, w, g, started, admitted, expected, max_rt in running:
        pool = admitted_pool or pool
        end = expected_end(now, started or admitted, expected or max_rt)
        seconds = (end - now).total_seconds()
        ends_at.setdefault(seconds, end)
        holding.setdefault(cluster_of[pool], []).append(
            Holding(queue=_queue(team_id), flavor=_flavor(pool), gpus=w * g, ends=seconds)
        )
    mine = _queue(team.pk)
    forecasts = [
        Forecast(
            queue=mine,
            cluster_queues=_cluster_queues([q for q in quotas if q["pool__cluster_id"] == cid],
                                           {p.pk: p.name for p in pools}),
            cohorts=_cohorts(q for q in quotas if q["pool__cluster_id"] == cid),
            holding=holding.get(cid, []), fair_sharing=cid in fair,
        )
        for cid in sorted({p.cluster_id for p in pools})
    ]  # fmt: skip
    ceiling = max(f.most for f in forecasts)
    free_now = max(f.free_now for f in forecasts)
    guessed = sum(1 for row in running if not row[7])
    names = ", ".join(p.name for p in pools)
    starts: dict[int, float | None] = {}

    def estimate(*, gpus: int, ahead: int = 0) -> tuple[object | None, str]:
        at, basis = estimate_without_note(gpus=gpus, ahead=ahead)
        return at, basis + held_note

    def estimate_without_note(*, gpus: int, ahead: int = 0) -> tuple[object | None, str]:
        need = gpus + ahead
        if need not in starts:
            found = [t for f in forecasts if (t := f.start(need)) is not None]
            starts[need] = min(found, default=None)
        seconds = starts[need]
        if seconds == 0:
            if need <= free_now:
                return now, (
                    f"{count(free_now, 'GPU')} of your team's ceiling ({ceiling}) look free; "
                    "the job should start as soon as the scheduler admits it."
                )
            return now, (
                f"Only {count(free_now, 'GPU')} look free, but other teams borrow your team's "
                "quota: Kueue takes it back for this job, which should start as soon as the "
                "scheduler admits it."
            )
        if seconds is None:
            return None, (
                f"No estimate: even when every running job has ended, {count(need, 'GPU')} do "
                f"not fit in your team's ceiling of {ceiling} until capacity is freed or quota "
                "grows."
            )
        basis = (
            f"Estimated with Kueue's rules from the expected ends of {len(running)} running "
            f"job(s) in {names} (start time + expected runtime"
            + (f"; {guessed} without one counted at their maximum runtime" if guessed else "")
            + f"): by then {count(need, 'GPU')}"
            + (f" (this job's {gpus} and {ahead} ahead of it)" if ahead else "")
            + f" fit in your team's ceiling of {ceiling} beside what the teams it shares quota "
            "with still hold. Jobs that end early or late, and higher-priority jobs, move it."
        )
        return ends_at.get(seconds) or now + timedelta(seconds=seconds), basis

    return estimate


def _queue(team_id: int) -> str:
    return f"team-{team_id}"


def _flavor(pool_id: int) -> str:
    return f"pool-{pool_id}"


def _cluster_queues(quotas: list[dict], pool_names: dict[int, str]) -> list[dict]:
    """The teams' ClusterQueues as kueuemodel.estimate takes them: GPUs only, one flavor per
    quota in pool-name order, the cluster's preemption and queueing policies."""
    by_team: dict[int, list[dict]] = {}
    for q in sorted(quotas, key=lambda q: pool_names[q["pool_id"]]):
        by_team.setdefault(q["team_id"], []).append(q)
    out = []
    for team_id, rows in by_team.items():
        department = rows[0]["team__department_id"]
        flavors = []
        for q in rows:
            resource = {"name": GPU, "nominalQuota": q["nominal_gpus"]}
            if department is not None and q["borrowing_limit"] is not None:
                resource["borrowingLimit"] = q["borrowing_limit"]
            if department is not None and q["lending_limit"] is not None:
                resource["lendingLimit"] = q["lending_limit"]
            flavors.append({"name": _flavor(q["pool_id"]), "resources": [resource]})
        spec: dict = {
            "namespaceSelector": {},
            "resourceGroups": [{"coveredResources": [GPU], "flavors": flavors}],
            "preemption": {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"},
            "queueingStrategy": "BestEffortFIFO",
        }
        if department is not None:
            spec["cohortName"] = f"department-{department}"
            spec["fairSharing"] = {"weight": str(rows[0]["team__fair_share_weight"])}
        out.append({"metadata": {"name": _queue(team_id)}, "spec": spec})
    return out


def _cohorts(quotas) -> list[dict]:
    """The Cohorts of the departments that share with the organisation (under its Cohort)."""
    out = {}
    for q in quotas:
        if q["team__department__shares_with_organisation"]:
            name = f"department-{q['team__department_id']}"
            weight = str(q["team__department__fair_share_weight"])
            spec = {"parentName": "organisation", "fairSharing": {"weight": weight}}
            out[name] = {"metadata": {"name": name}, "spec": spec}
    return list(out.values())


# ----------------------------------------------------------------------------- pages


def job_team_for(*, user, slug: str | None) -> Team:
    """The team a submission is for: the named one, or the user's only team."""
    teams = user_job_teams(user=user)
    if slug:
        # Submission asks this for every job: a plain lookup, no ordering.
        team = next(iter(teams.filter(slug=slug).order_by()[:1]), None)
        if team is None:
            raise ValidationError({"team": f"You are not a member of a team {slug[:63]!r}."})
        return team
    mine = list(teams.order_by()[:2])
    if len(mine) == 1:
        return mine[0]
    if not mine:
        raise ValidationError({"team": "You are not a member of any team."})
    raise ValidationError({"team": "You belong to several teams; say which one (its slug)."})


def user_job_teams(*, user) -> QuerySet[Team]:
    """Teams the user may submit jobs for (member or lead); one membership per user and team,
    so the join adds no duplicates. Each team carries the membership it was found through
    (`member_user_id`, `member_role`), so job_submit need not read it again."""
    return (
        Team.objects.filter(memberships__user=user)
        .annotate(member_user_id=F("memberships__user_id"), member_role=F("memberships__role"))
        .select_related("department")
    )


def team_pool_summary(*, team: Team) -> list[dict]:
    """Per pool the team may use: quota, borrowing room and what its jobs hold now."""
    pools = list(team_job_pools(team=team))
    limits = pool_limits(team=team, pools=pools)
    usage = team_pool_usage(team=team)
    return [{**limits[p.pk], "in_use": usage.get(p.pk, 0)} for p in pools]


def job_queue(*, team: Team, pool: NodePool | None = None) -> QuerySet[Job]:
    """The team's waiting jobs in the order the cluster will admit them (visibility position),
    then by submission time for those without one yet."""
    qs = Job.objects.filter(team=team, state__in=WAITING_STATES + ("pending_approval",))
    if pool is not None:
        qs = qs.filter(Q(pool=pool) | Q(pool__isnull=True))
    return qs.select_related("owner", "pool", "tier", "team").order_by(
        F("queue_position").asc(nulls_last=True), "submitted_at", "id"
    )


def job_running(*, team: Team, pool: NodePool | None = None) -> QuerySet[Job]:
    qs = Job.objects.filter(team=team, state__in=IN_USE_STATES)
    if pool is not None:
        qs = qs.filter(Q(admitted_pool=pool) | Q(admitted_pool__isnull=True, pool=pool))
    return qs.select_related("owner", "pool", "tier", "team", "admitted_pool").order_by(
        "admitted_at"
    )


def job_domains(*, job: Job) -> list[str]:
    """The domains of the job's topology level that its workers ran on (from their nodes; a
    JobSet's driver is not placed with them)."""
    level = None
    if job.pool_id and job.topology_level:
        level = job.pool.topology_level(job.topology_level)
    driver = f"{job.k8s_name}-{JOBSET_DRIVER}-"
    names = {
        p.node_name for p in job.pods.all() if p.node_name and not p.name.startswith(driver)
    } if level else set()  # fmt: skip
    if not names:
        return []
    labels = Node.objects.filter(cluster_id=job.cluster_id, name__in=names).values_list(
        "labels", flat=True
    )
    return sorted({lb[level["node_label"]] for lb in labels if lb.get(level["node_label"])})


@dataclass
class WaitFacts:
    """What every waiting job of a page or list is told about, read once: the apply messages
    the broker did not take (by cluster id, since when), and whether any worker runs."""

    unsent: dict[int, object]
    workers: dict


def wait_facts() -> WaitFacts:
    from core.selectors import unsent_since, worker_status

    unsent = {args[0]: at for args, at in unsent_since(name="queues.apply_jobs").items() if args}
    return WaitFacts(unsent=unsent, workers=worker_status())


def job_submitted_wait(*, job: Job, now=None, facts: WaitFacts | None = None) -> str:
    """What a submitted job waits for before its objects reach the cluster, for its page and
    the API: the cluster (disabled, not answering), the message broker (down: the request is
    kept), no worker running, what the last try said, or the worker creating it."""
    from core.selectors import no_worker_text, unsent_wait_text
    from fleet.selectors.clusters import cluster_wait_reason
    from queues.services.jobs.apply import APPLY_CLAIM_TTL

    if job.state != Job.State.SUBMITTED:
        return ""
    if job.cluster is None:
        return "No cluster is registered to run this job on."
    if wait := cluster_wait_reason(cluster=job.cluster):
        return wait
    facts = facts or wait_facts()
    if job.cluster_id in facts.unsent:
        return unsent_wait_text(facts.unsent[job.cluster_id], what="the request to create it")
    now = now or timezone.now()
    if job.apply_claimed_at and now - job.apply_claimed_at < APPLY_CLAIM_TTL:
        since = timezone.localtime(job.apply_claimed_at)
        takeover = timezone.localtime(job.apply_claimed_at + APPLY_CLAIM_TTL)
        return (
            f"A worker has been creating it in cluster {job.cluster.name} since "
            f"{since:%H:%M:%S}. If that worker stopped, another takes it over by "
            f"{takeover:%H:%M:%S} at the latest."
        )
    # Workers that reported before and stopped (none ever reported: just started, say).
    if not facts.workers["ok"] and facts.workers["last_seen"] is not None:
        return no_worker_text(facts.workers, what="it")
    if job.pending_reason:
        return job.pending_reason
    return f"Waiting for a worker to create it in cluster {job.cluster.name}."


def job_cancel_wait(*, job: Job) -> str:
    """For a cancelled job whose objects are still in its cluster: why, and when they go."""
    from fleet.selectors.clusters import cluster_wait_reason

    if job.state != Job.State.CANCELLED or not job.cluster_delete_pending or job.cluster is None:
        return ""
    name = job.cluster.name
    if wait := cluster_wait_reason(cluster=job.cluster, waiting="the deletion"):
        return f"Cancelled; its objects are still in cluster {name}. {wait}"
    return f"Cancelled; a worker is deleting its objects from cluster {name}."


def job_templates(*, user) -> QuerySet:
    """Templates of the teams the user may submit for (the job form offers them)."""
    from queues.models import JobTemplate

    return JobTemplate.objects.filter(team__memberships__user=user).select_related(
        "team", "created_by"
    )


def job_templates_visible(*, user) -> QuerySet:
    """Templates of the teams the user may see (the API's list)."""
    from queues.models import JobTemplate

    templates = JobTemplate.objects.select_related("team", "created_by")
    visible = team_ids_visible(user=user)
    return templates if visible is None else templates.filter(team_id__in=visible)


def sweep_list(*, user) -> QuerySet:
    """Sweeps of the teams the user may see, newest first."""
    from queues.models import Sweep

    sweeps = Sweep.objects.select_related("team", "owner")
    visible = team_ids_visible(user=user)
    return sweeps if visible is None else sweeps.filter(team_id__in=visible)


def sweep_jobs(*, sweep) -> list[dict]:
    """The sweep's jobs side by side: state, runtime so far and its GPU time at list price."""
    from fleet.selectors.prices import price_in_force

    now = timezone.now()
    rows = []
    prices: dict = {}
    for job in sweep.jobs.select_related("pool__gpu_model", "admitted_pool__gpu_model").order_by(
        "pk"
    ):
        runtime = None
        if job.started_at:
            runtime = int(((job.finished_at or now) - job.started_at).total_seconds())
        pool = job.admitted_pool or job.pool
        cost = currency = None
        if runtime is not None and pool is not None:
            key = (pool.gpu_model_id, job.started_at.date())
            if key not in prices:
                prices[key] = price_in_force(gpu_model=pool.gpu_model_id, at=job.started_at)
            price = prices[key]
            if price is not None:
                hours = Decimal(runtime * job.total_gpus) / Decimal(3600)
                cost = (hours * price.price_per_hour).quantize(Decimal("0.01"))
                currency = price.currency
        rows.append({"job": job, "runtime_seconds": runtime, "cost": cost, "currency": currency})
    return rows


def job_idle_status(*, job: Job) -> dict | None:
    """What the job page says about idle GPUs: idle now (since when, how busy, what happens
    next and when), or suspended by the idle policy; None when neither."""
    if job.state in Job.FINAL_STATES:
        return None
    tier = job.tier
    if job.idle_suspended_at is not None:
        return {"suspended_at": job.idle_suspended_at, "tier": tier}
    if job.state != Job.State.RUNNING or job.idle_since is None:
        return None
    warn_at = job.idle_since + timedelta(minutes=tier.idle_after_minutes)
    act_at = None
    if tier.idle_action == tier.IdleAction.SUSPEND:
        act_at = (job.idle_warned_at or warn_at) + timedelta(minutes=tier.idle_grace_minutes)
    return {
        "since": job.idle_since,
        "util": job.idle_util,
        "tier": tier,
        "warned_at": job.idle_warned_at,
        "warn_at": warn_at,
        "suspend_at": act_at,
    }
