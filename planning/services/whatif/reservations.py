"""Advance reservations in a what-if replay: the ClusterQueues changed while each was in force
(its lead time, its window), so the replay changes them at the same moments, as the cluster got
them (kueuemodel's replay takes them as `queue_changes`)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from django.db.models import Q

from queues.manifests.reservations import ACTIVE, HOLDING, Limits, reserved_limits
from queues.models import Reservation
from queues.services.reservations import lead_time

S = Reservation.State


def reservation_phases(*, cluster, start: datetime, end: datetime) -> list[tuple]:
    """(from, to, phase, reservation) of the reservations on the cluster's pools whose lead
    time or window overlapped [start, end): from when the beat moved them (planned times where
    it has not yet), to when they ended or were cancelled."""
    lead = lead_time()
    rows = (
        Reservation.objects.filter(pool__cluster=cluster, starts_at__lt=end + lead)
        .filter(ends_at__gt=start)
        .filter(
            Q(state__in=(S.HOLDING, S.ACTIVE, S.ENDED))
            | Q(state=S.CANCELLED, holding_since__isnull=False)
        )
        .order_by("starts_at", "pk")
    )
    out = []
    for r in rows:
        stopped = r.finished_at or r.ends_at
        opened = r.activated_at or (r.starts_at if r.state != S.HOLDING else None)
        held = r.holding_since or (r.starts_at - lead)
        held_to = min(opened or stopped, stopped)
        if held < held_to:
            out.append((held, held_to, HOLDING, r))
        if opened is not None and opened < stopped:
            out.append((opened, stopped, ACTIVE, r))
    return [p for p in out if p[0] < end and p[1] > start]


def quotas_at(quotas: dict, phases: list[tuple], at: datetime) -> dict:
    """{(team id, pool id): (nominal, borrowing, lending)} as the phases in force at `at`
    change them."""
    sums: dict[tuple[int, int], list[int]] = {}
    for lo, hi, phase, r in phases:
        if lo <= at < hi:
            held = sums.setdefault((r.team_id, r.pool_id), [0, 0])
            held[0 if phase == HOLDING else 1] += r.gpus
    out = dict(quotas)
    for key, (holding, active) in sums.items():
        base = Limits(*quotas[key]) if key in quotas else None
        limits = reserved_limits(base, holding=holding, active=active)
        if limits is not None:
            out[key] = (limits.nominal, limits.borrowing, limits.lending)
    return out


def queue_timeline(
    *, quotas: dict, phases: list[tuple], start: datetime, end: datetime,
    render: Callable[[dict], dict],
) -> tuple[dict, list[tuple[float, dict]]]:  # fmt: skip
    """The queues at `start` and the ClusterQueues that change after it, as (seconds from
    start, ClusterQueue). `render(quotas)` renders the replay's queues from a quotas dict.
    A team whose only quota in a pool comes from a reservation has a ClusterQueue (of no GPUs)
    from the start, so its jobs have a queue to wait in."""
    moments = sorted({t for lo, hi, _, _ in phases for t in (lo, hi) if start < t < end})
    empty = {(r.team_id, r.pool_id): (0, 0, 0) for _, _, _, r in phases}
    first = render({**empty, **quotas_at(quotas, phases, start)})
    known = {cq["metadata"]["name"]: cq for cq in first["cluster_queues"]}
    changes = []
    for at in moments:
        for cq in render({**empty, **quotas_at(quotas, phases, at)})["cluster_queues"]:
            name = cq["metadata"]["name"]
            if known.get(name) != cq:
                known[name] = cq
                changes.append(((at - start).total_seconds(), cq))
    return first, changes


def reservations_replayed(phases: list[tuple]) -> list[dict]:
    """The reservations a replay held, for the what-if's page."""
    seen = {}
    for _, _, _, r in phases:
        seen.setdefault(r.pk, {"id": r.pk, "team": r.team_id, "pool": r.pool_id, "gpus": r.gpus,
                               "starts_at": r.starts_at.isoformat(),
                               "ends_at": r.ends_at.isoformat()})  # fmt: skip
    return list(seen.values())


__all__ = ["queue_timeline", "quotas_at", "reservation_phases", "reservations_replayed"]
