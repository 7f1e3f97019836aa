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
from queues.selectors.approvers import Approvers, quota_request_approvers
from queues.selectors.tenancy import team_list, user_is_team_lead

State = Reservation.State

# Sent with reservation=; billing answers {"amount": Decimal, "currency": str, "basis": str,
# "gpu_hours": Decimal, "explanation": str} (the held capacity priced by the team's policy).
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


def reservations_awaiting_decision(*, user) -> list[Reservation]:
    """Pending reservations this user may decide."""
    if not user.is_authenticated:
        return []
    pending = reservation_list(user=user).filter(state=State.PENDING).exclude(requested_by=user)
    return [r for r in pending if reservation_approvers(reservation=r).includes(user)]


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


def reservation_price(*, reservation: Reservation) -> dict | None:
    """The held capacity priced by the team's billing policy (billing answers), or None."""
    for _, answer in reservation_priced.send(sender=Reservation, reservation=reservation):
        if answer is not None:
            return answer
    return None
