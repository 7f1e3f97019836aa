"""Where a job waits in its Volcano queue, and when it may start.

Volcano shows no queue positions (volcano-sh/volcano#2876, #2900), so the portal works them out
the way Volcano's scheduler orders a queue's PodGroups: by its job-order plugins (priority: the
higher PriorityClass value first; gang: jobs not yet ready first, which every waiting job is),
then by creation time, then by uid. A waiting PodGroup is one still Pending (not yet enqueued).

The start estimate is Volcano's enqueue rule played forward in time: a PodGroup is enqueued when
its minResources fit within its queue's capability beside what the queue holds, and its pods
run when the pool's GPUs are free. The running jobs give their GPUs back at their expected ends
(as for Kueue: start time + expected runtime, else the maximum runtime); the job and the GPUs of
the PodGroups ahead of it in the queue start together at the first moment both fit.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.db.models import Q, Sum

from core.text import count
from fleet.models import Node
from fleet.models.inventory import is_gpu_resource
from kueuemodel.resources import to_units
from queues.manifests.reservations import quota_rows_with_reservations
from queues.models import Job, Quota, Reservation
from queues.selectors.jobs import expected_end
from queues.selectors.quotas import IN_USE_STATES

WAITING_PHASES = ("", "Pending")


def podgroup_gpus(pg: dict) -> int:
    """The GPUs of a PodGroup's minResources (what its gang needs to be enqueued)."""
    total = 0
    for name, value in ((pg.get("spec") or {}).get("minResources") or {}).items():
        if is_gpu_resource(name):
            try:
                total += to_units(name, value)
            except (ValueError, TypeError, ArithmeticError):
                continue
    return total


def podgroup_job(pg: dict) -> str:
    """The name of the vcjob that owns the PodGroup ("" when it is not a vcjob's)."""
    meta = pg.get("metadata") or {}
    for owner in meta.get("ownerReferences") or []:
        if owner.get("kind") == "Job" and str(owner.get("apiVersion", "")).startswith("batch.volc"):
            return owner.get("name", "")
    return (meta.get("labels") or {}).get("volcano.sh/job-name", "")


def queue_order_key(pg: dict, priorities: dict[str, int]) -> tuple:
    """Volcano's order within a queue: higher priority first, then earlier creation, then uid.
    `priorities`: PriorityClass name -> value (a class not found counts 0, as in Volcano)."""
    meta, spec = pg.get("metadata") or {}, pg.get("spec") or {}
    priority = priorities.get(spec.get("priorityClassName") or "", 0)
    return (-int(priority), meta.get("creationTimestamp") or "", meta.get("uid") or "")


@dataclass(frozen=True)
class Place:
    """A waiting PodGroup's place: its queue, 1-based position and the GPUs ahead of it."""

    queue: str
    position: int
    gpus_ahead: int


def queue_places(podgroups, priorities: dict[str, int]) -> dict[tuple[str, str], Place]:
    """(namespace, vcjob name) -> Place of every waiting PodGroup, per queue in Volcano's order."""
    by_queue: dict[str, list[dict]] = {}
    for pg in podgroups:
        phase = (pg.get("status") or {}).get("phase") or ""
        if phase in WAITING_PHASES:
            by_queue.setdefault((pg.get("spec") or {}).get("queue") or "default", []).append(pg)
    places = {}
    for queue, pgs in by_queue.items():
        ahead = 0
        for i, pg in enumerate(sorted(pgs, key=lambda p: queue_order_key(p, priorities)), 1):
            meta = pg.get("metadata") or {}
            job = podgroup_job(pg)
            if job:
                places[(meta.get("namespace", ""), job)] = Place(queue, i, ahead)
            ahead += podgroup_gpus(pg)
    return places


def first_fit(
    *, need: int, ceiling: int | None, capacity: int | None, queue_holding, pool_holding
) -> float | None:
    """Seconds from now until `need` GPUs fit both the queue's capability (`ceiling`, None: no
    capability set) beside what the queue holds and the pool's `capacity` (None: unknown)
    beside what every job in the pool holds; None when they never do. Holdings: (gpus, seconds
    until they are given back)."""
    if (ceiling is not None and need > ceiling) or (capacity is not None and need > capacity):
        return None
    moments = {0.0, *(float(s) for _, s in queue_holding), *(float(s) for _, s in pool_holding)}
    for t in sorted(moments):
        in_queue = sum(g for g, s in queue_holding if s > t)
        in_pool = sum(g for g, s in pool_holding if s > t)
        if (ceiling is None or in_queue + need <= ceiling) and (
            capacity is None or in_pool + need <= capacity
        ):
            return t
    return None


def volcano_start_estimator(*, team, pools, now):
    """start_estimator's counterpart for a Volcano cluster: a function (gpus, ahead) ->
    (estimated start, how it was made) for the team's jobs waiting in one pool's leaf queue.
    None where the team has no quota in the pool (no queue to wait in)."""
    pools = list(pools)
    if len(pools) != 1:
        return None
    pool = pools[0]
    rows = list(
        Quota.objects.filter(team=team, pool=pool).values(
            "team_id", "pool_id", "nominal_gpus", "borrowing_limit", "lending_limit"
        )
    )
    # The team's reservation whose window is open adds to its quota (its leaf Queue deserves it).
    open_now = Reservation.objects.filter(team=team, pool=pool, state=Reservation.State.ACTIVE)
    rows = quota_rows_with_reservations(rows, open_now, extra=lambda r: {})
    quota = rows[0] if rows else None
    if quota is None:
        return None
    ceiling = (
        None if quota["borrowing_limit"] is None
        else quota["nominal_gpus"] + quota["borrowing_limit"]
    )  # fmt: skip
    if team.queue_hold_reason:
        ceiling = 0
    capacity = Node.objects.filter(pool=pool).aggregate(n=Sum("gpu_allocatable"))["n"]
    running = list(
        Job.objects.filter(state__in=IN_USE_STATES)
        .filter(Q(admitted_pool=pool) | Q(admitted_pool__isnull=True, pool=pool))
        .order_by()
        .values_list(
            "team_id", "workers", "gpus_per_worker", "started_at", "admitted_at",
            "expected_runtime_seconds", "max_runtime_seconds",
        )
    )  # fmt: skip
    ends_at: dict[float, object] = {}
    queue_holding, pool_holding = [], []
    guessed = 0
    for team_id, w, g, started, admitted, expected, max_rt in running:
        end = expected_end(now, started or admitted, expected or max_rt)
        seconds = (end - now).total_seconds()
        ends_at.setdefault(seconds, end)
        pool_holding.append((w * g, seconds))
        guessed += not expected
        if team_id == team.pk:
            queue_holding.append((w * g, seconds))
    in_queue = sum(g for g, _ in queue_holding)
    in_pool = sum(g for g, _ in pool_holding)
    limit = (
        f"your team's queue capability in {pool.name} of {ceiling}" if ceiling is not None
        else f"your team's queue in {pool.name} (no capability set)"
    )  # fmt: skip
    room = f" and the pool's {capacity} GPUs" if capacity is not None else ""
    starts: dict[int, float | None] = {}

    def estimate(*, gpus: int, ahead: int = 0) -> tuple[object | None, str]:
        need = gpus + ahead
        if need not in starts:
            starts[need] = first_fit(
                need=need, ceiling=ceiling, capacity=capacity,
                queue_holding=queue_holding, pool_holding=pool_holding,
            )  # fmt: skip
        seconds = starts[need]
        if seconds == 0:
            free = ceiling - in_queue if ceiling is not None else (capacity or 0) - in_pool
            return now, (
                f"{count(max(free, 0), 'GPU')} of {limit} look free; the job should start as "
                "soon as the scheduler enqueues it."
            )
        if seconds is None:
            if ceiling is not None and need > ceiling:
                where = limit
            else:
                where = f"pool {pool.name}'s {capacity} GPUs"
            return None, (
                f"No estimate: even when every running job has ended, {count(need, 'GPU')} do "
                f"not fit in {where} until capacity is freed or quota grows."
            )
        basis = (
            f"Estimated with Volcano's queue order (priority, then submission time) from the "
            f"expected ends of {len(queue_holding)} running job(s) of your team and "
            f"{len(pool_holding) - len(queue_holding)} of other teams in {pool.name} (start "
            "time + expected runtime"
            + (f"; {guessed} without one counted at their maximum runtime" if guessed else "")
            + f"): by then {count(need, 'GPU')}"
            + (f" (this job's {gpus} and {ahead} ahead of it)" if ahead else "")
            + f" fit in {limit}{room}. Jobs that end early or late, and higher-priority jobs, "
            "move it."
        )
        return ends_at.get(seconds) or now + timedelta(seconds=seconds), basis

    return estimate
