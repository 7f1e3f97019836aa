"""Writes for advance reservations: request, decide (four eyes, capacity-checked), cancel, the
beat's transitions (lead time, window open, window closed) and the site's lead time.

Every write leaves an AuditEvent. Nothing here calls Kubernetes: a transition that changes what
the cluster should hold enqueues a reconcile after commit, and the reconcile renders the queues
from the quotas and the reservations in force (queues.manifests.reservations). Transitions lock
the row and check its state, so a beat run twice, or a worker killed halfway, changes nothing
twice.
"""

from __future__ import annotations

import datetime as dt

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from core.roles import is_platform_admin
from core.text import count
from fleet.models import NodePool
from queues.models import Reservation, ReservationSettings, Team
from queues.selectors.reservations import (
    reservation_approvers,
    reservation_can_cancel,
    reservation_room,
    user_can_reserve,
)
from queues.services.audit import audit
from queues.services.notifications import email_send_on_commit
from queues.services.reconcile import reconcile_cluster_enqueue

State = Reservation.State
MAX_GPUS = 100_000
MAX_WINDOW = dt.timedelta(days=92)
BOOKED = Reservation.BOOKED_STATES


def _values(r: Reservation) -> dict:
    return {
        "team": r.team.slug,
        "pool": r.pool.name,
        "gpus": r.gpus,
        "starts_at": r.starts_at.isoformat(),
        "ends_at": r.ends_at.isoformat(),
        "state": r.state,
    }


def _window(r) -> str:
    return f"{r.starts_at:%Y-%m-%d %H:%M}–{r.ends_at:%Y-%m-%d %H:%M} UTC"


def lead_time() -> dt.timedelta:
    """How long before a window the team's GPUs stop being lent (the admin's setting)."""
    return dt.timedelta(minutes=ReservationSettings.current().lead_minutes)


# -- validation --------------------------------------------------------------------------------


def _gpus(errors: dict, value) -> int | None:
    if value in (None, "") or isinstance(value, bool):
        errors["gpus"] = "Enter a whole number of GPUs."
        return None
    try:
        number = int(str(value).strip())
    except (TypeError, ValueError):
        errors["gpus"] = f"“{value}” is not a whole number of GPUs."
        return None
    if number < 1:
        errors["gpus"] = "Reserve at least 1 GPU."
    elif number > MAX_GPUS:
        errors["gpus"] = "That is more GPUs than any pool holds."
    else:
        return number
    return None


def _check_fit(errors: dict, *, pool, gpus, starts_at, ends_at, exclude_id=None) -> None:
    room = reservation_room(pool=pool, starts_at=starts_at, ends_at=ends_at, exclude_id=exclude_id)
    if gpus > room["left"]:
        errors["gpus"] = (
            f"{count(gpus, 'GPU')} do not fit in {pool.name} for this window: it has "
            f"{room['capacity']} GPUs, the teams' quotas guarantee {room['guaranteed']} and "
            f"other reservations hold up to {room['reserved']} at once then, so at most "
            f"{max(0, room['left'])} can be reserved."
        )


def _validate(*, team, pool, gpus, starts_at, ends_at, reason, now) -> tuple[int | None, dict]:
    errors: dict[str, str] = {}
    gpus = _gpus(errors, gpus)
    if pool is None:
        errors["pool"] = "Choose a pool."
    elif pool.cluster.deleted_at is not None:
        errors["pool"] = "This pool's cluster has been removed."
    if starts_at is None:
        errors["starts_at"] = "Enter when the reservation starts."
    elif starts_at <= now:
        errors["starts_at"] = "The window must start in the future."
    if ends_at is None:
        errors["ends_at"] = "Enter when the reservation ends."
    elif starts_at is not None and ends_at <= starts_at:
        errors["ends_at"] = "The window must end after it starts."
    elif starts_at is not None and ends_at - starts_at > MAX_WINDOW:
        errors["ends_at"] = "A reservation lasts at most 92 days; ask for quota instead."
    if not (reason or "").strip():
        errors["reason"] = "Say what the GPUs are for, so the manager can decide."
    if not errors:
        _check_fit(errors, pool=pool, gpus=gpus, starts_at=starts_at, ends_at=ends_at)
    return gpus, errors


# -- request and decisions ---------------------------------------------------------------------


def reservation_request(
    *,
    actor,
    team: Team,
    pool: NodePool | None,
    gpus,
    starts_at: dt.datetime | None,
    ends_at: dt.datetime | None,
    reason: str,
    now: dt.datetime | None = None,
) -> Reservation:
    """A lead of the team asks for `gpus` GPUs of `pool` in [starts_at, ends_at)."""
    if not user_can_reserve(user=actor, team=team):
        raise PermissionDenied("Only a lead of the team can reserve GPUs for it.")
    now = now or timezone.now()
    gpus, errors = _validate(team=team, pool=pool, gpus=gpus, starts_at=starts_at,
                             ends_at=ends_at, reason=reason, now=now)  # fmt: skip
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        reservation = Reservation.objects.create(
            team=team, pool=pool, gpus=gpus, starts_at=starts_at, ends_at=ends_at,
            reason=reason.strip(), requested_by=actor,
        )  # fmt: skip
        audit(actor=actor, verb="reservation.request", obj=reservation, team=team,
              after=_values(reservation),
              message=f"{actor} asked to reserve {count(gpus, 'GPU')} of {pool.name} for "
              f"{team.name}, {_window(reservation)}.")  # fmt: skip
        approvers = reservation_approvers(reservation=reservation)
        email_send_on_commit(
            recipients=[u.email for u in approvers.users],
            subject=f"Reservation for {team.name}: {count(gpus, 'GPU')} of {pool.name}",
            body=f"{actor} asks to reserve {count(gpus, 'GPU')} of {pool.name}, "
            f"{_window(reservation)}.\n\nWhy: {reservation.reason}\n",
        )
    return reservation


def _lock(pk: int) -> Reservation:
    return (
        Reservation.objects.select_for_update(of=("self",))
        .select_related("team__department", "pool__cluster", "requested_by")
        .get(pk=pk)
    )


def _lock_pending(pk: int) -> Reservation:
    reservation = _lock(pk)
    if reservation.state != State.PENDING:
        raise ValidationError(
            f"This reservation is already {reservation.get_state_display().lower()}; nothing "
            "was changed."
        )
    return reservation


def _require_approver(reservation: Reservation, user) -> None:
    approvers = reservation_approvers(reservation=reservation)
    if not approvers.includes(user):
        raise PermissionDenied(approvers.refusal(user))


def reservation_approve(
    *, reservation: Reservation, approver, reason: str = "", now: dt.datetime | None = None
) -> Reservation:
    """A manager of the department approves: the GPUs must still fit beside the teams'
    quotas and the other booked reservations in the window (checked with the pool locked, so
    two approvals in one pool cannot both take the last GPUs)."""
    _require_approver(reservation, approver)
    now = now or timezone.now()
    with transaction.atomic():
        NodePool.objects.select_for_update().filter(pk=reservation.pool_id).first()
        locked = _lock_pending(reservation.pk)
        errors: dict[str, str] = {}
        if locked.ends_at <= now:
            errors["ends_at"] = "The window has already ended; it can only be rejected."
        else:
            _check_fit(errors, pool=locked.pool, gpus=locked.gpus, starts_at=locked.starts_at,
                       ends_at=locked.ends_at, exclude_id=locked.pk)  # fmt: skip
        if errors:
            raise ValidationError(errors)
        locked.state = State.APPROVED
        locked.decided_by, locked.decided_at = approver, now
        locked.decision_reason = (reason or "").strip()
        locked.save()
        audit(actor=approver, verb="reservation.approve", obj=locked, team=locked.team,
              after=_values(locked), message=f"Approved: {count(locked.gpus, 'GPU')} of "
              f"{locked.pool.name}, {_window(locked)}.")  # fmt: skip
        email_send_on_commit(
            recipients=[locked.requested_by.email],
            subject=f"Reservation for {locked.team.name} approved",
            body=f"{approver} approved {count(locked.gpus, 'GPU')} of {locked.pool.name}, "
            f"{_window(locked)}.\n",
        )
        # Within the lead time already (or the window): move on now, not at the next beat.
        _advance(locked, now=now, lead=lead_time())
    return locked


def reservation_reject(*, reservation: Reservation, approver, reason: str) -> Reservation:
    """Reject a pending reservation with a reason the team can read."""
    _require_approver(reservation, approver)
    reason = (reason or "").strip()
    if not reason:
        raise ValidationError({"reason": "Tell the team why, so they can ask better next time."})
    with transaction.atomic():
        locked = _lock_pending(reservation.pk)
        locked.state = State.REJECTED
        locked.decided_by, locked.decided_at = approver, timezone.now()
        locked.decision_reason = reason
        locked.save()
        audit(actor=approver, verb="reservation.reject", obj=locked, team=locked.team,
              after=_values(locked), message=f"Rejected: {reason}")  # fmt: skip
        email_send_on_commit(
            recipients=[locked.requested_by.email],
            subject=f"Reservation for {locked.team.name} rejected",
            body=f"{approver} rejected the reservation of {count(locked.gpus, 'GPU')} of "
            f"{locked.pool.name}.\n\nReason: {reason}\n",
        )
    return locked


def reservation_cancel(*, reservation: Reservation, actor, now=None) -> Reservation:
    """Its requester, a lead of the team or a platform admin withdraws it; an open window
    closes at once (its held time is billed up to now)."""
    if reservation.state not in (State.PENDING, *BOOKED):
        raise ValidationError(
            f"This reservation is already {reservation.get_state_display().lower()}."
        )
    if not reservation_can_cancel(user=actor, reservation=reservation):
        raise PermissionDenied("Only who asked, a lead of the team or an admin can cancel it.")
    now = now or timezone.now()
    with transaction.atomic():
        locked = _lock(reservation.pk)
        if locked.state not in (State.PENDING, *BOOKED):
            raise ValidationError(
                f"This reservation is already {locked.get_state_display().lower()}."
            )
        was = locked.state
        locked.state = State.CANCELLED
        locked.finished_at = now
        if was == State.ACTIVE:
            # Held (and billed) until now: the window is cut short.
            locked.ends_at = max(now, locked.starts_at + dt.timedelta(seconds=1))
        locked.save()
        audit(actor=actor, verb="reservation.cancel", obj=locked, team=locked.team,
              after=_values(locked), message=f"Cancelled ({was}).")  # fmt: skip
        if was in (State.HOLDING, State.ACTIVE):
            reconcile_cluster_enqueue(locked.pool.cluster_id)
    return locked


# -- the beat ----------------------------------------------------------------------------------


def _advance(r: Reservation, *, now: dt.datetime, lead: dt.timedelta) -> bool:
    """Move one locked, booked reservation to the state its window says; True when it moved
    (the caller enqueues the reconcile)."""
    if r.state not in BOOKED:
        return False
    if now >= r.ends_at:
        target = State.ENDED
    elif now >= r.starts_at:
        target = State.ACTIVE
    elif now >= r.starts_at - lead:
        target = State.HOLDING
    else:
        target = State.APPROVED
    if target == r.state or (target == State.APPROVED and r.state == State.HOLDING):
        return False  # never back from holding (a longer lead time set later does not undo it)
    before = _values(r)
    if target == State.HOLDING:
        r.holding_since = now
        verb, text = (
            "reservation.hold",
            (
                f"The lead time began: {r.team.name}'s GPUs in {r.pool.name} stop being lent so "
                f"{count(r.gpus, 'GPU')} are free at {r.starts_at:%H:%M} UTC."
            ),
        )
    elif target == State.ACTIVE:
        r.activated_at = now
        r.holding_since = r.holding_since or now
        verb, text = (
            "reservation.activate",
            (
                f"The window opened: {r.team.name}'s quota in {r.pool.name} includes "
                f"{count(r.gpus, 'GPU')} until {r.ends_at:%Y-%m-%d %H:%M} UTC."
            ),
        )
    else:
        r.finished_at = now
        verb, text = (
            "reservation.expire",
            (f"The window closed: {r.team.name}'s quota in {r.pool.name} is back to its own."),
        )
    r.state = target
    r.save()
    audit(actor=None, verb=verb, obj=r, team=r.team, before=before, after=_values(r),
          message=text)  # fmt: skip
    reconcile_cluster_enqueue(r.pool.cluster_id)
    return True


def reservations_advance(*, now: dt.datetime | None = None) -> list[int]:
    """Beat: bring every booked reservation to the state its window and the lead time say
    (approved → holding → active → ended); ids of those that moved. Each is locked and moved
    in its own transaction, so a worker killed halfway leaves the rest for the next run."""
    now = now or timezone.now()
    lead = lead_time()
    due = (
        Reservation.objects.filter(state__in=BOOKED, starts_at__lte=now + lead)
        .values_list("pk", flat=True)
        .order_by("starts_at", "pk")
    )
    moved = []
    for pk in list(due):
        with transaction.atomic():
            r = _lock(pk)
            if _advance(r, now=now, lead=lead):
                moved.append(pk)
    # Requests nobody decided before their window ended: withdrawn, so no list keeps them.
    for pk in Reservation.objects.filter(state=State.PENDING, ends_at__lte=now).values_list(
        "pk", flat=True
    ):
        with transaction.atomic():
            r = _lock(pk)
            if r.state != State.PENDING:
                continue
            r.state, r.finished_at = State.CANCELLED, now
            r.save()
            audit(actor=None, verb="reservation.expire", obj=r, team=r.team, after=_values(r),
                  message="Nobody decided it before its window ended.")  # fmt: skip
            moved.append(pk)
    return moved


def reservation_settings_update(*, actor, lead_minutes) -> ReservationSettings:
    """A platform admin sets the lead time (minutes, 0 to 10080)."""
    if not is_platform_admin(actor):
        raise PermissionDenied("Only platform admins set the reservations' lead time.")
    errors = {}
    try:
        minutes = int(str(lead_minutes).strip())
    except (TypeError, ValueError):
        minutes = None
    if minutes is None or isinstance(lead_minutes, bool) or not 0 <= minutes <= 10080:
        errors["lead_minutes"] = "Enter whole minutes from 0 to 10080 (a week)."
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        current, _ = ReservationSettings.objects.select_for_update().get_or_create(pk=1)
        before = {"lead_minutes": current.lead_minutes}
        current.lead_minutes, current.updated_by = minutes, actor
        current.save()
        audit(actor=actor, verb="reservation.settings", obj=current, before=before,
              after={"lead_minutes": minutes},
              message=f"Lead time set to {minutes} minutes.")  # fmt: skip
    return current
