"""What an advance reservation does to a team's quota in its pool, as the cluster gets it: a
pure rule over numbers, used to render the queues and by every estimate that reads quota.

A reservation's GPUs come out of the pool's capacity that no team is guaranteed (approval
checks that they fit beside the teams' nominal quotas and the other reservations). Kueue and
Volcano hand out only quota, so nobody borrows capacity no queue owns; what stands between the
team and its GPUs at the start is the team's own quota lent to others. So:

- From the lead time before the window (state `holding`) the team's queue lends `gpus` fewer
  of its quota in the pool (Kueue `lendingLimit`, Volcano `guarantee` = nominal − lending):
  other teams may borrow less, and what they borrow ends by the start instead of being
  preempted at it.
- In the window (state `active`) the team's nominal quota includes the reserved GPUs, and its
  lending limit stays what it was without them, so the reserved GPUs are never lent: other
  teams cannot borrow them, used or not (the team is billed for holding them).
- At the end the queue is rendered from the quota alone again.

A team with no quota in the pool gets one for the window: the reserved GPUs, no borrowing, no
lending.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

HOLDING = "holding"
ACTIVE = "active"


@dataclass(frozen=True)
class Limits:
    """A team's quota in one pool: nominal GPUs, borrowing and lending limits (None = none)."""

    nominal: int
    borrowing: int | None
    lending: int | None


def reserved_limits(base: Limits | None, *, holding: int = 0, active: int = 0) -> Limits | None:
    """The quota a team's queue gets in a pool with `holding` GPUs in their lead time and
    `active` GPUs in their window (base None: the team has no quota there)."""
    if not holding and not active:
        return base
    if base is None:
        if not active:
            return None  # nothing of the team's own is lent, so nothing to stop lending
        base = Limits(nominal=0, borrowing=0, lending=0)
    lendable = base.nominal if base.lending is None else min(base.lending, base.nominal)
    return Limits(
        nominal=base.nominal + active,
        borrowing=base.borrowing,
        lending=max(0, lendable - holding),
    )


def reserved_by_team_pool(reservations: Iterable) -> dict[tuple[int, int], tuple[int, int]]:
    """(team id, pool id) -> (GPUs holding, GPUs active) of reservations in force."""
    out: dict[tuple[int, int], list[int]] = defaultdict(lambda: [0, 0])
    for r in reservations:
        if r.state == HOLDING:
            out[(r.team_id, r.pool_id)][0] += r.gpus
        elif r.state == ACTIVE:
            out[(r.team_id, r.pool_id)][1] += r.gpus
    return {key: (h, a) for key, (h, a) in out.items()}


def quotas_with_reservations(quotas: Iterable, reservations: Iterable, *, quota_class) -> list:
    """The Quota rows as the cluster should have them while `reservations` are in force:
    unsaved copies where a reservation changes them, new unsaved rows where a team without
    quota in a pool has a reservation open there (`quota_class`: the Quota model)."""
    rows = [{"team_id": q.team_id, "pool_id": q.pool_id, "nominal_gpus": q.nominal_gpus,
             "borrowing_limit": q.borrowing_limit, "lending_limit": q.lending_limit, "quota": q}
            for q in quotas]  # fmt: skip
    out = []
    for row in quota_rows_with_reservations(
        rows, reservations, extra=lambda r: {"quota": None, "team": r.team, "pool": r.pool}
    ):
        quota = row["quota"]
        limits = (row["nominal_gpus"], row["borrowing_limit"], row["lending_limit"])
        if quota is not None and limits == (quota.nominal_gpus, quota.borrowing_limit,
                                            quota.lending_limit):  # fmt: skip
            out.append(quota)
            continue
        copy = (
            quota_class(pk=quota.pk, team=quota.team, pool=quota.pool, ends_at=quota.ends_at)
            if quota is not None
            else quota_class(team=row["team"], pool=row["pool"])
        )
        copy.nominal_gpus, copy.borrowing_limit, copy.lending_limit = limits
        out.append(copy)
    return out


def quota_rows_with_reservations(
    rows: list[dict], reservations: Iterable, *, extra: Callable | None = None
) -> list[dict]:
    """Quota rows as dicts (team_id, pool_id, nominal_gpus, borrowing_limit, lending_limit and
    whatever else each carries) as the reservations in force change them; a team with no row in
    a pool where its reservation is open gets one, its other keys `extra(reservation)`
    (default: what the estimates' rows carry, `reservation_row_extra`)."""
    extra = extra or reservation_row_extra
    reservations = [r for r in reservations if r.state in (HOLDING, ACTIVE)]
    in_force = reserved_by_team_pool(reservations)
    out = []
    for row in rows:
        held = in_force.pop((row["team_id"], row["pool_id"]), None)
        if held is None:
            out.append(row)
            continue
        base = Limits(row["nominal_gpus"], row["borrowing_limit"], row["lending_limit"])
        limits = reserved_limits(base, holding=held[0], active=held[1])
        out.append({**row, "nominal_gpus": limits.nominal, "borrowing_limit": limits.borrowing,
                    "lending_limit": limits.lending})  # fmt: skip
    firsts = {}
    for r in reservations:
        firsts.setdefault((r.team_id, r.pool_id), r)
    for key, (holding, active) in sorted(in_force.items()):
        limits = reserved_limits(None, holding=holding, active=active)
        if limits is None:
            continue
        out.append({**extra(firsts[key]), "team_id": key[0], "pool_id": key[1],
                    "nominal_gpus": limits.nominal, "borrowing_limit": limits.borrowing,
                    "lending_limit": limits.lending})  # fmt: skip
    return out


def reservation_row_extra(r) -> dict:
    """What the estimates' quota rows carry about a team and pool, from a reservation."""
    department = r.team.department
    return {
        "pool__cluster_id": r.pool.cluster_id,
        "team__fair_share_weight": r.team.fair_share_weight,
        "team__department_id": r.team.department_id,
        "team__department__shares_with_organisation": bool(
            department and department.shares_with_organisation
        ),
        "team__department__fair_share_weight": department.fair_share_weight if department else 1,
    }
