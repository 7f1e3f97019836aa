"""The what-if simulator: replay the recorded jobs of the last days against today's quota
configuration and against a proposal, side by side, with kubesim's Kueue engine on a
simulated clock (kubesim.replay), and file the quota requests a proposal implies.

What is replayed, per Kueue cluster: every job submitted in the window that reached the queue
(not drafts, rejected or never-applied ones), at its submission time, with its size, its tier's
priority (or the proposal's), and its run time as it ran (its longest finished pod, so that a
preempted job's first attempts and the wait between do not count; else finish − last start; a
job still running at the end runs to the end; one that never started runs its expected, else
maximum, run time; one cancelled while waiting leaves the queue when it was cancelled).
ClusterQueues and LocalQueues are rendered as for the cluster (queue holds aside, the
proposal's fair-sharing weights), and the departments' Cohorts (under the organisation's for
those that share with it, today or in the proposal); each pool has its nodes; Kueue's fair
sharing is on where the cluster's ClusterQueues report a share (or as the proposal says).

Figures, per team: jobs, median and p90 queue wait (submission to first start; a job that never
started counts the time to the end of the window), preemptions, GPU-hours run, utilisation of
its nominal quota (GPU-hours run / (nominal GPUs × hours)), and their cost at the price book's
price of each pool's GPU; per pool: capacity, GPU-hours busy and idle. Beside them, the waits
as they happened, so that the replay of today's configuration can be checked against them.

Pods are placed on the pool's nodes as kubesim's scheduler binds them (fewest free GPUs that
fit), so fragmentation delays large jobs as it did; a proposal that resizes a pool adds nodes
like its largest or removes them from the end.

A team that shares its queue fairly among its members (today's setting, or the proposal's) is
replayed with Kueue's admission fair sharing at the portal's half-life (member_fair_sharing_config):
each member's jobs wait in their own LocalQueue, whose usage memory starts empty with the window;
its figures add each member's jobs and waits.

Jobs submitted before the window that had not ended when it opened are carried over: one that
was running holds its GPUs from the start for what was left of its run (whatever the quota now
says: Kueue does not evict what it admitted), one that was waiting queues at the start in its
turn; their waits are not the window's. A preempted job starts its run over, unless it writes
checkpoints (a checkpoint volume): then it goes on from where its workers had got to.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from core.metrics import WHATIF_DURATION, WHATIF_RUNS
from core.roles import is_manager, is_platform_admin
from fleet.models import Cluster, Node, NodePool
from kueuemodel.afs import AfsConfig
from kueuemodel.replay import ReplayJob
from kueuemodel.replay.parallel import replay_all, usable_cpus
from planning.models import WhatIfRun
from queues.manifests.quotas import (
    cluster_queue_manifest,
    cohort_manifest,
    fair_share_weight_text,
    local_queue_manifest,
    local_queue_name,
    member_queue_manifests,
    member_queue_name,
    organisation_cohort_manifest,
)
from queues.models import (
    Department,
    Job,
    Membership,
    PriorityTier,
    Quota,
    QuotaRequest,
    Team,
)
from queues.selectors.fair_share import clusters_with_fair_sharing
from queues.selectors.quotas import pool_capacity
from queues.services.audit import audit
from queues.services.fair_share import (
    department_fair_share_set,
    parse_fair_share_weight,
    team_fair_share_set,
    team_member_fair_sharing_set,
)
from queues.services.jobs.apply import claim_holder, holder_dead, this_host_prefix

S = Job.State
log = logging.getLogger(__name__)
MAX_DAYS = 62
MAX_GPUS = 100_000
INT32 = 2**31 - 1


# -- who may ------------------------------------------------------------------------------------


def whatif_teams(*, user):
    """Teams whose quota the user may propose changes to: platform admins all, managers their
    departments'."""
    if is_platform_admin(user):
        return Team.objects.select_related("department")
    return Team.objects.select_related("department").filter(department__managers=user)


def whatif_runs(*, user):
    """Runs the user may see: admins all, managers their own, nobody else any."""
    runs = WhatIfRun.objects.select_related("created_by")
    if is_platform_admin(user):
        return runs
    return runs.filter(created_by=user) if is_manager(user) else runs.none()


def _require(user) -> None:
    if not (is_manager(user) or is_platform_admin(user)):
        raise PermissionDenied("What-if runs are for department managers and platform admins.")


# -- the proposal --------------------------------------------------------------------------------


def _limit(value, name: str, errors: dict, *, allow_none: bool, top: int = MAX_GPUS):
    if value is None or value == "":
        if allow_none:
            return None
        errors[name] = "Enter a number."
        return None
    if isinstance(value, bool):
        errors[name] = f"Enter a whole number from 0 to {top}."
        return None
    try:
        number = int(str(value).strip())
    except ValueError:
        errors[name] = f"Enter a whole number from 0 to {top}."
        return None
    if not 0 <= number <= top:
        errors[name] = f"Enter a whole number from 0 to {top}."
        return None
    return number


def proposal_clean(
    *, user, quotas=(), pool_sizes=(), tiers=(), weights=(), fair_sharing=None,
    member_fair_sharing=(), departments=(),
) -> dict:  # fmt: skip
    """The proposal in stored form (pool and team by id), or a ValidationError naming each
    entry that is wrong and how. `weights`: fair-sharing weights per team; `fair_sharing`:
    replay the proposal with Kueue's fair sharing on (True) or off (False) instead of as each
    cluster runs it (None); `member_fair_sharing`: teams that share their queue fairly among
    their members (True) or stop (False); `departments` (platform admins): departments that
    share idle GPUs with the organisation or stop (`shares_with_organisation`), and their
    fair-sharing weight there (`weight`)."""
    errors: dict = {}
    teams = {t.slug: t for t in whatif_teams(user=user)}
    pools = {p.pk: p for p in NodePool.objects.select_related("cluster")}
    clean: dict = {"quotas": [], "pool_sizes": [], "tiers": [], "weights": []}
    seen = set()
    for i, q in enumerate(quotas or []):
        where = f"quotas[{i}]"
        if not isinstance(q, dict):
            errors[where] = "Give an object with team, pool and nominal_gpus."
            continue
        team = teams.get(str(q.get("team", "")))
        pool = pools.get(q.get("pool")) if type(q.get("pool")) is int else None
        if team is None:
            errors[f"{where}.team"] = "Name a team of a department you manage."
        if pool is None:
            errors[f"{where}.pool"] = "Give a pool id."
        nominal = _limit(q.get("nominal_gpus"), f"{where}.nominal_gpus", errors, allow_none=False)
        borrowing = _limit(
            q.get("borrowing_limit"), f"{where}.borrowing_limit", errors, allow_none=True
        )
        lending = _limit(q.get("lending_limit"), f"{where}.lending_limit", errors, allow_none=True)
        if lending is not None and nominal is not None and lending > nominal:
            errors[f"{where}.lending_limit"] = "A team cannot lend more than its nominal quota."
        if team and pool:
            if (team.pk, pool.pk) in seen:
                errors[where] = "This team and pool are listed twice."
            seen.add((team.pk, pool.pk))
            clean["quotas"].append({
                "team": team.pk, "pool": pool.pk, "nominal_gpus": nominal,
                "borrowing_limit": borrowing, "lending_limit": lending,
            })  # fmt: skip
    for i, p in enumerate(pool_sizes or []):
        where = f"pool_sizes[{i}]"
        pool = (
            pools.get(p.get("pool")) if isinstance(p, dict) and type(p.get("pool")) is int else None
        )
        if pool is None:
            errors[f"{where}.pool"] = "Give a pool id."
            continue
        gpus = _limit(p.get("gpus"), f"{where}.gpus", errors, allow_none=False)
        clean["pool_sizes"].append({"pool": pool.pk, "gpus": gpus})
    tier_ids = dict(PriorityTier.objects.values_list("name", "pk"))
    for i, t in enumerate(tiers or []):
        where = f"tiers[{i}]"
        tier = tier_ids.get(str(t.get("tier", ""))) if isinstance(t, dict) else None
        if tier is None:
            errors[f"{where}.tier"] = "Name a priority tier."
            continue
        value = t.get("value")
        if isinstance(value, bool) or not isinstance(value, int) or abs(value) > INT32:
            errors[f"{where}.value"] = "Enter a whole number (a 32-bit priority)."
            continue
        clean["tiers"].append({"tier": tier, "value": value})
    mine = "Name a team of a department you manage."
    for where, team, w in _named("weights", weights, "team", teams, mine, errors):
        try:
            weight = parse_fair_share_weight(w.get("weight"))
        except ValidationError as exc:
            errors[f"{where}.weight"] = exc.message_dict["weight"][0]
            continue
        clean["weights"].append({"team": team.pk, "weight": fair_share_weight_text(weight)})
    clean["member_fair_sharing"] = []
    for where, team, m in _named("member_fair_sharing", member_fair_sharing, "team", teams, mine,
                                 errors):  # fmt: skip
        if not isinstance(m.get("enabled"), bool):
            errors[f"{where}.enabled"] = "Give true or false."
            continue
        clean["member_fair_sharing"].append({"team": team.pk, "enabled": m["enabled"]})
    clean["departments"] = _departments_clean(user, departments, errors)
    if fair_sharing is not None and not isinstance(fair_sharing, bool):
        errors["fair_sharing"] = "Give true, false, or null to replay as each cluster runs."
    elif fair_sharing is not None:
        clean["fair_sharing"] = fair_sharing
    if errors:
        raise ValidationError(errors)
    return clean


def _named(field: str, items, key: str, known: dict, missing: str, errors: dict):
    """(where, object, entry) for each entry of a proposal's list whose `key` names one of
    `known` (by slug), once; an error saying what to fix for the others."""
    seen = set()
    for i, entry in enumerate(items or []):
        where = f"{field}[{i}]"
        found = known.get(str(entry.get(key, ""))) if isinstance(entry, dict) else None
        if found is None:
            errors[f"{where}.{key}"] = missing
            continue
        if found.pk in seen:
            errors[where] = f"This {key} is listed twice."
        seen.add(found.pk)
        yield where, found, entry


def _departments_clean(user, departments, errors: dict) -> list[dict]:
    """The proposal's department entries in stored form: {department id,
    shares_with_organisation (or None: as today), weight (text, or None: as today)}."""
    if not departments:
        return []
    if not is_platform_admin(user):
        errors["departments"] = (
            "Only platform admins propose how departments share idle GPUs across the organisation."
        )
        return []
    by_slug = {d.slug: d for d in Department.objects.all()}
    out = []
    for where, department, d in _named("departments", departments, "department", by_slug,
                                       "Name a department by its slug.", errors):  # fmt: skip
        shares, weight = d.get("shares_with_organisation"), d.get("weight")
        if shares is not None and not isinstance(shares, bool):
            errors[f"{where}.shares_with_organisation"] = "Give true or false."
            continue
        if weight is not None:
            try:
                weight = fair_share_weight_text(parse_fair_share_weight(weight))
            except ValidationError as exc:
                errors[f"{where}.weight"] = exc.message_dict["weight"][0]
                continue
        if shares is None and weight is None:
            errors[where] = "Give shares_with_organisation, weight, or both."
            continue
        out.append({"department": department.pk, "shares_with_organisation": shares,
                    "weight": weight})  # fmt: skip
    return out


def whatif_create(*, actor, name: str = "", days: int = 30, **proposal) -> WhatIfRun:
    """Record a what-if run and queue its replay."""
    _require(actor)
    errors = {}
    if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= MAX_DAYS:
        errors["days"] = f"Replay from 1 to {MAX_DAYS} days."
    name = (name or "").strip()
    if len(name) > 200:
        errors["name"] = "Keep the name to 200 characters."
    try:
        clean = proposal_clean(user=actor, **proposal)
    except ValidationError as exc:
        errors.update(exc.message_dict)
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        run = WhatIfRun.objects.create(
            name=name or f"Proposal of {timezone.now():%Y-%m-%d %H:%M}", created_by=actor,
            days=days, proposal=clean,
        )  # fmt: skip
        audit(actor=actor, verb="whatif.create", obj=run, after=clean)
        transaction.on_commit(lambda: _dispatch([run.pk]))
    return run


# -- a worker lost in the middle -------------------------------------------------------------------

# A replay claimed longer ago is taken over (a month of 20,000 jobs takes well under a minute).
CLAIM_TTL = timedelta(minutes=30)
# A queued run whose task was sent longer ago and not taken is sent again.
REDISPATCH_AFTER = timedelta(minutes=5)


def _dispatch(run_ids: list[int]) -> None:
    """Send the runs' replay tasks (a broker that is down keeps them, see core.worker); a
    duplicate is harmless: a run is claimed once."""
    from planning.tasks import run_whatif

    WhatIfRun.objects.filter(pk__in=run_ids).update(dispatched_at=timezone.now())
    for pk in run_ids:
        run_whatif.delay(pk)


def whatif_release_dead() -> list[int]:
    """Runs that a worker process on this host claimed and that no longer exists (killed in
    the middle of a replay) go back to the queue and are sent again; returns their ids.
    Worker processes call this when they start (planning.apps)."""
    running = WhatIfRun.objects.filter(
        state=WhatIfRun.State.RUNNING, claimed_by__startswith=this_host_prefix()
    ).values_list("pk", "claimed_by")
    dead = [pk for pk, holder in running if holder_dead(holder)]
    return _requeue(dead, why="its worker process is gone")


def whatif_resume(*, now: datetime | None = None) -> list[int]:
    """Beat: runs a worker lost go back to the queue (claimed by a dead process on this host,
    or longer ago than CLAIM_TTL), and queued runs whose task was not taken within
    REDISPATCH_AFTER (or never sent) are sent again; returns the ids sent."""
    now = now or timezone.now()
    requeued = whatif_release_dead()
    stale = list(WhatIfRun.objects.filter(state=WhatIfRun.State.RUNNING,
                                          claimed_at__lt=now - CLAIM_TTL)
                 .values_list("pk", flat=True))  # fmt: skip
    requeued += _requeue(stale, why="its claim outlived the time a replay takes")
    waiting = list(
        WhatIfRun.objects.filter(state=WhatIfRun.State.QUEUED)
        .filter(Q(dispatched_at__isnull=True) | Q(dispatched_at__lt=now - REDISPATCH_AFTER))
        .exclude(pk__in=requeued)
        .values_list("pk", flat=True)
    )
    _dispatch(waiting)
    return requeued + waiting


def _requeue(run_ids: list[int], *, why: str) -> list[int]:
    """Put RUNNING runs back in the queue and send them again (each only if still running as
    found: a worker that finished it in between wins)."""
    back = []
    for pk in run_ids:
        if WhatIfRun.objects.filter(pk=pk, state=WhatIfRun.State.RUNNING).update(
            state=WhatIfRun.State.QUEUED, claimed_by="", claimed_at=None
        ):
            log.warning("what-if run %s queued again: %s", pk, why)
            back.append(pk)
    if back:
        _dispatch(back)
    return back


# -- the replay -----------------------------------------------------------------------------------


def _history(*, start: datetime, end: datetime) -> list[Job]:
    """The jobs submitted in the window, and those submitted before it that had not ended when
    it opened (their `carried` set: they hold or wait for quota, but their waits are not the
    window's)."""
    jobs = list(
        Job.objects.filter(
            Q(submitted_at__gte=start)
            | Q(finished_at__gt=start)
            | (Q(finished_at__isnull=True) & ~Q(state__in=Job.FINAL_STATES)),
            submitted_at__lt=end,
            cluster__scheduler=Cluster.Scheduler.KUEUE,
        )  # fmt: skip
        .exclude(state__in=(S.DRAFT, S.PENDING_APPROVAL, S.REJECTED))
        .exclude(Q(state=S.FAILED) & Q(started_at__isnull=True) & Q(admitted_at__isnull=True))
        .select_related("team", "team__department", "pool", "admitted_pool", "tier", "owner")
        .only(
            "id",
            "team",
            "owner__username",
            "pool",
            "admitted_pool",
            "tier",
            "workers",
            "gpus_per_worker",
            "submitted_at",
            "started_at",
            "finished_at",
            "state",
            "cluster_id",
            "expected_runtime_seconds",
            "max_runtime_seconds",
            "checkpoint_volume",
            "k8s_name",
        )  # fmt: skip
        .order_by("submitted_at", "pk")
    )
    for job in jobs:
        job.carried = job.submitted_at < start
    return jobs


# A pod that ended this way did not run its course: preempted or stopped (Deleted), or failed.
CUT_SHORT = ("Deleted", "Failed")


def _pod_runs(jobs: list[Job]) -> dict[int, tuple[float, datetime | None]]:
    """Per job from its recorded pods: the longest run a pod completed (seconds), and its last
    pod start. A preempted job's earlier pods were stopped part of the way (the status sync
    records them as Deleted when they vanish), so the run that completed tells how long the
    job needs, not finish − first start, which counts the wait between."""
    from queues.models import JobPod

    runs: dict[int, list] = {}
    ids = [j.pk for j in jobs if j.started_at]
    for chunk in range(0, len(ids), 5000):
        rows = JobPod.objects.filter(job_id__in=ids[chunk:chunk + 5000],
                                     started_at__isnull=False)  # fmt: skip
        for job_id, started, finished, phase in rows.values_list(
            "job_id", "started_at", "finished_at", "phase"
        ):
            longest, last = runs.setdefault(job_id, [0.0, started])
            if finished and phase not in CUT_SHORT:
                longest = max(longest, (finished - started).total_seconds())
            runs[job_id] = [longest, max(last, started)]
    return {k: (v[0], v[1]) for k, v in runs.items()}


def _replay_jobs(
    jobs: list[Job], *, start, end, tier_values: dict, shared: set[int]
) -> list[tuple[Job, ReplayJob]]:
    """The jobs as the replay takes them; those of the teams in `shared` (member fair
    sharing) wait in their owner's own LocalQueue, the others in their team's."""
    out = []
    pod_runs = _pod_runs(jobs)
    for job in jobs:
        pool = job.admitted_pool or job.pool
        if pool is None:
            continue
        submit = max(0.0, (job.submitted_at - start).total_seconds())
        cancel = None
        running_at_start = bool(job.carried and job.started_at and job.started_at < start)
        if running_at_start:  # what was left of its run when the window opened
            runtime = ((job.finished_at or end) - start).total_seconds()
        elif job.started_at:
            longest, last_start = pod_runs.get(job.pk, (0.0, None))
            since = last_start or job.started_at
            if job.finished_at:  # its completed run; else it ended part of the way
                runtime = longest or (job.finished_at - since).total_seconds()
            elif job.state in (S.ADMITTED, S.RUNNING):  # still running: at least so far
                runtime = max((end - since).total_seconds(), job.expected_runtime_seconds or 0)
            else:  # preempted and waiting again: it needs a whole run
                runtime = float(job.expected_runtime_seconds or job.max_runtime_seconds)
        else:
            runtime = float(job.expected_runtime_seconds or job.max_runtime_seconds)
            if job.state == S.CANCELLED and job.finished_at:
                cancel = (job.finished_at - start).total_seconds()
        out.append((job, ReplayJob(
            key=f"j{job.pk}", namespace=job.team.namespace,
            queue=(member_queue_name(job.team, job.owner) if job.team_id in shared
                   else local_queue_name(job.team)),
            pool=pool.name, resource=pool.gpu_resource, workers=job.workers,
            gpus_per_worker=job.gpus_per_worker,
            priority=tier_values.get(job.tier_id, job.tier.value), submit=submit,
            runtime=max(1.0, runtime), cancel=cancel, running_at_start=running_at_start,
            checkpointed=bool(job.checkpoint_volume), name=job.k8s_name,
        )))  # fmt: skip
    return out


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
    by_team: dict[int, list[Quota]] = defaultdict(list)
    for (team_id, pool_id), (nominal, borrowing, lending) in quotas.items():
        if pool_id in pools:
            by_team[team_id].append(Quota(team_id=team_id, pool=pools[pool_id],
                                          nominal_gpus=nominal, borrowing_limit=borrowing,
                                          lending_limit=lending))  # fmt: skip
    teams = Team.objects.select_related("department").in_bulk(list(by_team))
    mine = [j for j in history if (j.admitted_pool or j.pool or j).cluster_id == cluster.pk]
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
            lqs += member_queue_manifests(team, _members(team, mine))
    jobs = _replay_jobs(mine, start=start, end=end, tier_values=tier_values, shared=sharing)
    run = {
        "cluster_queues": cqs, "local_queues": lqs, "cohorts": cohorts,
        "pools": {p.name: _pool_nodes(p, sizes.get(p.pk, 0)) for p in pools.values()},
        "jobs": [r for _, r in jobs], "horizon": (end - start).total_seconds(), "origin": start,
        "fair_sharing": fair_sharing,
        "admission_fair_sharing": member_fair_sharing_config() if sharing else None,
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


def _percentile(values, q):
    from billing.pricing import percentile

    value = percentile(values, q)
    return None if value is None else round(value, 1)


def _figures(
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
        acc["waits"].append((r.started if r.started is not None else horizon) - r.submit)
        if job.team_id in member_teams:
            per_member[job.team_id][job.owner.username].append(acc["waits"][-1])
        # Clock stamps of a second's resolution can put a start just before the submission.
        acc["actual"].append(max(0.0, ((job.started_at or end) - job.submitted_at).total_seconds()))
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


def _prices(pools, at) -> dict:
    from billing.selectors.prices import price_book_for

    book = price_book_for(start=at - timedelta(hours=1), end=at)
    out = {}
    for pool in pools:
        price = book.at(pool.gpu_model_id, "", at - timedelta(hours=1))
        out[pool.pk] = price.price_per_hour if price else Decimal(0)
    return out


def whatif_execute(*, run_id: int, now: datetime | None = None) -> WhatIfRun:
    """Replay the run's window under today's configuration and the proposal; store the figures."""
    claimed = WhatIfRun.objects.filter(pk=run_id, state=WhatIfRun.State.QUEUED).update(
        state=WhatIfRun.State.RUNNING, claimed_by=claim_holder(), claimed_at=timezone.now()
    )
    run = WhatIfRun.objects.get(pk=run_id)
    if not claimed:
        return run
    began = time.monotonic()
    try:
        result = whatif_compute(days=run.days, proposal=run.proposal, now=now)
    except Exception as exc:  # the run records the failure; the replay has no side effects
        WhatIfRun.objects.filter(pk=run_id).update(
            state=WhatIfRun.State.FAILED, error=f"{type(exc).__name__}: {exc}",
            finished_at=timezone.now(),
        )  # fmt: skip
        WHATIF_RUNS.labels("failed").inc()
        raise
    took = time.monotonic() - began
    WhatIfRun.objects.filter(pk=run_id).update(
        state=WhatIfRun.State.DONE, result=result, seconds=round(took, 2),
        finished_at=timezone.now(),
    )  # fmt: skip
    WHATIF_RUNS.labels("done").inc()
    WHATIF_DURATION.observe(took)
    run.refresh_from_db()
    return run


def replay_processes() -> int:
    """How many replays run at once: WHATIF_PROCESSES, else one per core this process has."""
    return settings.WHATIF_PROCESSES or usable_cpus()


def whatif_compute(*, days: int, proposal: dict, now: datetime | None = None) -> dict:
    """Both scenarios' figures for the window of `days` ending now."""
    end = now or timezone.now()
    start = end - timedelta(days=days)
    hours = days * 24
    horizon = (end - start).total_seconds()
    history = _history(start=start, end=end)
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
    for label, quotas, sizes, _, _, fair, _, sharing, _ in scenarios:
        runs, busy = [], {}
        for (of, (cluster_runs, cluster_pools, _)), result in zip(setups, results, strict=True):
            if of == label:
                runs += cluster_runs
                busy.update({pk: result.busy_gpu_seconds.get(p.name, 0.0)
                             for pk, p in cluster_pools.items()})  # fmt: skip
        by_name = {p.name: p for p in pools.values()}
        out[label] = _figures(runs=runs, busy=busy, quotas=quotas, sizes=sizes, pools=by_name,
                              prices=prices, hours=hours, horizon=horizon, end=end,
                              member_teams=member_teams, sharing=sharing)  # fmt: skip
        out[label]["fair_sharing"] = any(fair.values())
    return out


# -- applying ------------------------------------------------------------------------------------


def whatif_apply(*, actor, run: WhatIfRun) -> list[QuotaRequest]:
    """File the quota requests the proposal implies (each quota that differs from today's), on
    behalf of the teams, for the usual decision (not by the one who filed them)."""
    from queues.services.quotas import quota_request_create

    if not (run.created_by_id == actor.pk or is_platform_admin(actor)):
        raise PermissionDenied("Only who made the proposal (or a platform admin) applies it.")
    if run.state != WhatIfRun.State.DONE:
        raise ValidationError("Apply a proposal once its replay is done.")
    if run.applied_at is not None:
        raise ValidationError("This proposal has already been applied.")
    weights = run.proposal.get("weights", [])
    shared = run.proposal.get("member_fair_sharing", [])
    teams = whatif_teams(user=actor).in_bulk(
        [q["team"] for q in run.proposal.get("quotas", [])]
        + [w["team"] for w in weights]
        + [m["team"] for m in shared]
    )
    pools = NodePool.objects.in_bulk([q["pool"] for q in run.proposal.get("quotas", [])])
    current = {(q.team_id, q.pool_id): q for q in Quota.objects.filter(team_id__in=list(teams))}
    filed = []
    with transaction.atomic():
        locked = WhatIfRun.objects.select_for_update().get(pk=run.pk)
        if locked.applied_at is not None:
            raise ValidationError("This proposal has already been applied.")
        for q in run.proposal.get("quotas", []):
            team, pool = teams.get(q["team"]), pools.get(q["pool"])
            if team is None or pool is None:
                continue
            now_q = current.get((team.pk, pool.pk))
            values = (q["nominal_gpus"], q["borrowing_limit"], q["lending_limit"])
            if now_q and values == (now_q.nominal_gpus, now_q.borrowing_limit,
                                    now_q.lending_limit):  # fmt: skip
                continue
            filed.append(quota_request_create(
                actor=actor, team=team, pool=pool, nominal_gpus=values[0],
                borrowing_limit=values[1], lending_limit=values[2], on_behalf=True,
                justification=f"What-if proposal #{run.pk} “{run.name}”: replayed over the last "
                f"{run.days} days before filing.",
            ))  # fmt: skip
        weighed, sharing = {}, {}
        for w in weights:  # the weights are the managers' own to set: set at once (audited)
            team = teams.get(w["team"])
            if team is not None and team.fair_share_weight != Decimal(w["weight"]):
                team_fair_share_set(actor=actor, team=team, weight=w["weight"])
                weighed[team.slug] = w["weight"]
        for m in shared:  # so is sharing a team's queue among its members
            team = teams.get(m["team"])
            if team is not None and team.member_fair_sharing != m["enabled"]:
                team_member_fair_sharing_set(actor=actor, team=team, enabled=m["enabled"])
                sharing[team.slug] = m["enabled"]
        departments = {}
        for d in run.proposal.get("departments", []):  # the platform admins' own to set
            department = Department.objects.filter(pk=d["department"]).first()
            if department is None:
                continue
            changed = department_fair_share_set(
                actor=actor, department=department,
                shares_with_organisation=d["shares_with_organisation"], weight=d["weight"],
            )  # fmt: skip
            departments[changed.slug] = {
                "shares_with_organisation": changed.shares_with_organisation,
                "weight": fair_share_weight_text(changed.fair_share_weight),
            }
        locked.applied_at = timezone.now()
        locked.applied_requests = [r.pk for r in filed]
        locked.save(update_fields=["applied_at", "applied_requests"])
        audit(actor=actor, verb="whatif.apply", obj=locked,
              after={"quota_requests": locked.applied_requests,
                     "fair_share_weights": weighed, "member_fair_sharing": sharing,
                     "departments": departments})  # fmt: skip
    run.refresh_from_db()
    return filed
