"""Reads for advance reservations: who sees and decides them, the room left in a pool for a
window, what is in force, and their price (which billing answers: queues never prices by a
team's billing policy, so it asks through `reservation_priced`)."""

from __future__ import annotations

import datetime as dt

from django.db.models import Q, QuerySet, Sum
from django.dispatch import Signal

from core.roles import is_platform_admin, sees_everything
from fleet.models import Node, NodePool
from queues.models import Quota, Reservation, Team
from queues.selectors.approvers import Approvers, department_decides, quota_request_approvers
from queues.selectors.tenancy import team_list, user_is_team_lead

State = Reservation.State

# Sent with reservations=[...]; billing answers {reservation id: {"amount": Decimal,
# "currency": str, "basis": str, "gpu_hours": Decimal, "explanation": str}} (the held capacity
# priced by the team's policy), in a fixed number of queries however many are asked.
reservation_priced = Signal()


def reservation_list(*, user) -> QuerySet[Reservation]:
    """Reservations of the teams the user sees (own teams; the department's for managers)."""
    qs = Reservation.objects.select_related(
        "team__department", "pool__gpu_model", "pool__cluster", "requested_by", "decided_by"
    )
    if sees_everything(user):
        return qs
    return qs.filter(team__in=team_list(user=user))


def reservation_get(*, user, pk: int) -> Reservation:
    """One visible reservation; raises Reservation.DoesNotExist otherwise (so 404)."""
    return reservation_list(user=user).get(pk=pk)


def user_can_reserve(*, user, team: Team) -> bool:
    """Leads of the team (and platform admins) may request a reservation for it."""
    if not user.is_authenticated:
        return False
    return is_platform_admin(user) or user_is_team_lead(user=user, team=team)


def teams_user_can_reserve_for(*, user) -> QuerySet[Team]:
    if is_platform_admin(user):
        return team_list(user=user).order_by("name")
    return (
        team_list(user=user)
        .filter(memberships__user=user, memberships__role="lead")
        .order_by("name")
    )


def reservation_approvers(*, reservation: Reservation) -> Approvers:
    """Who may approve or reject a reservation: as for quota, a manager of the department
    (then a platform admin), never its requester."""
    return quota_request_approvers(quota_request=reservation)


def reservations_awaiting_decision(*, user) -> QuerySet[Reservation]:
    """Pending reservations this user may decide (reservation_approvers, as a query: the
    department's managers; platform admins where no manager but the requester is)."""
    if not user.is_authenticated:
        return Reservation.objects.none()
    return (
        reservation_list(user=user)
        .filter(department_decides(user=user), state=State.PENDING)
        .exclude(requested_by=user)
        .order_by("starts_at", "pk")
    )


def reservation_can_cancel(*, user, reservation: Reservation) -> bool:
    """Its requester, a lead of its team, and platform admins, while it is not over."""
    if reservation.state not in (State.PENDING, *Reservation.BOOKED_STATES):
        return False
    return (
        reservation.requested_by_id == user.pk
        or is_platform_admin(user)
        or user_is_team_lead(user=user, team=reservation.team)
    )


# -- capacity ----------------------------------------------------------------------------------


def _peak(intervals: list[tuple[dt.datetime, dt.datetime, int]]) -> int:
    """The most GPUs the half-open intervals hold at one moment."""
    events = sorted([(s, g) for s, _, g in intervals] + [(e, -g) for _, e, g in intervals],
                    key=lambda ev: (ev[0], ev[1]))  # fmt: skip
    peak = held = 0
    for _, change in events:  # ends (negative) sort before starts at the same moment
        held += change
        peak = max(peak, held)
    return peak


def reservation_room(
    *, pool: NodePool, starts_at: dt.datetime, ends_at: dt.datetime, exclude_id=None
) -> dict:
    """The pool's GPUs, the teams' guarantees (nominal quotas), the most GPUs other booked
    reservations hold at one moment of [starts_at, ends_at), and what is left for another."""
    capacity = Node.objects.filter(pool=pool).aggregate(n=Sum("gpu_capacity"))["n"] or 0
    guaranteed = Quota.objects.filter(pool=pool).aggregate(n=Sum("nominal_gpus"))["n"] or 0
    others = (
        Reservation.objects.filter(pool=pool, state__in=Reservation.BOOKED_STATES)
        .filter(starts_at__lt=ends_at, ends_at__gt=starts_at)
        .exclude(pk=exclude_id)
        .values_list("starts_at", "ends_at", "gpus")
    )
    clipped = [(max(s, starts_at), min(e, ends_at), g) for s, e, g in others]
    reserved = _peak(clipped)
    return {
        "capacity": capacity,
        "guaranteed": guaranteed,
        "reserved": reserved,
        "left": capacity - guaranteed - reserved,
    }


# -- in force ----------------------------------------------------------------------------------


def reservations_in_force(*, pools=None, teams=None) -> list[Reservation]:
    """Reservations whose lead time or window is on now (holding, active), as the beat left
    them: what the cluster objects and the estimates carry."""
    qs = Reservation.objects.filter(state__in=(State.HOLDING, State.ACTIVE)).select_related(
        "team__department", "pool"
    )
    if pools is not None:
        qs = qs.filter(pool__in=pools)
    if teams is not None:
        qs = qs.filter(team__in=teams)
    return list(qs.order_by("pk"))


def reservation_timeline(*, user, start: dt.datetime, end: dt.datetime) -> list[Reservation]:
    """Booked and pending reservations the user sees that overlap [start, end)."""
    return list(
        reservation_list(user=user)
        .filter(state__in=(State.PENDING, *Reservation.BOOKED_STATES, State.ENDED))
        .filter(Q(starts_at__lt=end) & Q(ends_at__gt=start))
        .order_by("starts_at", "pk")
    )


def reservation_prices(*, reservations) -> dict[int, dict]:
    """Reservation id -> its held capacity priced by the team's billing policy (billing
    answers; a reservation without a price in the price book is left out)."""
    reservations = list(reservations)
    if not reservations:
        return {}
    for _, answer in reservation_priced.send(sender=Reservation, reservations=reservations):
        if answer is not None:
            return answer
    return {}


def reservation_price(*, reservation: Reservation) -> dict | None:
    """One reservation's price (reservation_prices), or None."""
    return reservation_prices(reservations=[reservation]).get(reservation.pk)


TIMELINE_DAYS = 28
TIMELINE_ROWS = 50


def reservation_timeline_rows(*, user, now: dt.datetime, days: int = TIMELINE_DAYS) -> dict:
    """The dashboard's timeline: reservations the user sees from a day ago to `days` ahead,
    each with its place on the time axis (percent) and its price by the team's policy."""
    start = now - dt.timedelta(days=1)
    end = now + dt.timedelta(days=days)
    span = (end - start).total_seconds()
    rows = []
    shown = reservation_timeline(user=user, start=start, end=end)[:TIMELINE_ROWS]
    prices = reservation_prices(reservations=shown)
    for r in shown:
        lo, hi = max(r.starts_at, start), min(r.ends_at, end)
        left = round(100 * (lo - start).total_seconds() / span, 2)
        width = max(round(100 * (hi - lo).total_seconds() / span, 2), 0.5)
        rows.append({"reservation": r, "left": left, "width": width,
                     "price": prices.get(r.pk)})  # fmt: skip
    return {
        "rows": rows,
        "start": start,
        "end": end,
        "now_left": round(100 * (now - start).total_seconds() / span, 2),
    }
