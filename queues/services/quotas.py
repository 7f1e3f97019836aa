"""Writes for quotas: quota requests and their decisions, settling them once the cluster has
applied them, and burst expiry. (Over 400 lines: a request's whole life, filed to settled.)

Every decision and quota change leaves an AuditEvent. Nothing here calls Kubernetes: after the
database commit a reconcile of the cluster is enqueued; the reconcile task then asks
`quota_requests_settle` to bring the requests up to date with what the cluster accepted.
"""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import Q
from django.dispatch import Signal
from django.utils import timezone

from core.roles import is_platform_admin
from core.text import count
from fleet.models import NodePool
from queues.manifests.quotas import OWNER_TEAM, cluster_queue_name
from queues.models import ManagedObject, Quota, QuotaRequest, Team
from queues.selectors.approvers import quota_request_approvers
from queues.selectors.quotas import pool_capacity, quota_request_queue_names, user_can_request
from queues.selectors.tenancy import user_is_team_lead, user_manages_team
from queues.services.audit import audit
from queues.services.notifications import email_send_on_commit
from queues.services.reconcile import (
    QUEUE_KINDS,
    managed_objects_sync,
    reconcile_cluster_enqueue,
)

State = QuotaRequest.State
# A number left out: a limit a request does not name keeps the team's value; a decision that
# leaves a number out grants what was asked.
UNSET = object()

# Asked inside the transaction that files a request for more quota (quota_request=, quota= the
# team's quota in the pool or None): a receiver may decide it at once by answering (approved,
# why, figures), or answer None to leave it to a person. planning connects its auto-approval
# rule here; queues cannot import it.
quota_request_filed = Signal()


def _quota_values(quota: Quota | None) -> dict | None:
    if quota is None:
        return None  # no quota in the pool at all (not zero GPUs with unlimited borrowing)
    return {
        "nominal_gpus": quota.nominal_gpus,
        "borrowing_limit": quota.borrowing_limit,
        "lending_limit": quota.lending_limit,
        "ends_at": quota.ends_at.isoformat() if quota.ends_at else None,
    }


def _notify(quota_request: QuotaRequest, subject: str, body: str) -> None:
    """E-mail the requester once the transaction commits (a failed mail never undoes work)."""
    email_send_on_commit(recipients=[quota_request.requested_by.email], subject=subject, body=body)


def _tell_approvers(quota_request: QuotaRequest) -> None:
    """E-mail whoever can decide a new request (the department's managers, else the platform
    admins; never its requester), once it commits. Their home pages list it too."""
    approvers = quota_request_approvers(quota_request=quota_request)
    team, pool = quota_request.team, quota_request.pool
    link = f"{settings.PORTAL_URL}/quota/requests/{quota_request.pk}/"
    email_send_on_commit(
        recipients=[u.email for u in approvers.users],
        subject=f"Quota request for {team.name}: {count(quota_request.nominal_gpus, 'GPU')} in "
        f"{pool.name}",
        body=(
            f"{quota_request.requested_by.get_username()} asks for "
            f"{count(quota_request.nominal_gpus, 'GPU')} in {pool.name} for {team.name}.\n\n"
            f"Why: {quota_request.justification}\n\nDecide at {link}\n"
        ),
    )


# -- validation --------------------------------------------------------------------------------


def _int_field(errors: dict, name: str, value, *, minimum: int, required: bool) -> int | None:
    if value in (None, ""):
        if required:
            errors[name] = "Enter a whole number of GPUs."
        return None
    if isinstance(value, bool):
        errors[name] = "Enter a whole number of GPUs."
        return None
    try:
        number = int(str(value).strip())
    except (TypeError, ValueError):
        errors[name] = f"“{value}” is not a whole number of GPUs."
        return None
    if number < minimum:
        errors[name] = (
            "Ask for at least 1 GPU." if minimum == 1 else "Use 0 or a positive number of GPUs."
        )
        return None
    if number > 100_000:
        errors[name] = "That is more GPUs than any pool holds."
        return None
    return number


def _validate_numbers(
    *, team: Team, nominal, borrowing, lending, nominal_field: str = "nominal_gpus"
) -> tuple[int | None, int | None, int | None, dict]:
    """The numbers checked; a limit left UNSET stays UNSET (the team keeps its own)."""
    errors: dict[str, str] = {}
    nominal = _int_field(errors, nominal_field, nominal, minimum=1, required=True)
    if borrowing is not UNSET:
        borrowing = _int_field(errors, "borrowing_limit", borrowing, minimum=0, required=False)
    if lending is not UNSET:
        lending = _int_field(errors, "lending_limit", lending, minimum=0, required=False)
    if nominal is not None and lending not in (None, UNSET) and lending > nominal:
        errors["lending_limit"] = (
            f"The lending limit ({lending}) cannot exceed the nominal quota ({nominal}): "
            "a team can only lend GPUs it has."
        )
    if borrowing not in (None, UNSET) and team.department_id is None:
        # Borrowing happens within a cohort (Kueue) or a parent queue (Volcano): departments.
        errors["borrowing_limit"] = (
            "This team belongs to no department, so there is no cohort to borrow from."
        )
    return nominal, borrowing, lending, errors


def _lead_or_above(user, team: Team) -> bool:
    return (
        is_platform_admin(user)
        or user_is_team_lead(user=user, team=team)
        or user_manages_team(user=user, team=team)
    )


def _is_decrease(quota: Quota | None, nominal, borrowing, lending) -> bool:
    """Every requested number is at most the current one (no limit counts as infinite; a
    limit left UNSET stays as it is)."""
    if quota is None:
        return False

    def le(new, current):
        if new is UNSET or current is None:
            return True
        return new is not None and new <= current

    return (
        nominal <= quota.nominal_gpus
        and le(borrowing, quota.borrowing_limit)
        and le(lending, quota.lending_limit)
    )


# -- filing a request --------------------------------------------------------------------------


def quota_request_create(
    *,
    actor,
    team: Team,
    pool: NodePool | None,
    nominal_gpus,
    borrowing_limit=UNSET,
    lending_limit=UNSET,
    ends_at: dt.datetime | None = None,
    justification: str = "",
    on_behalf: bool = False,
) -> QuotaRequest:
    """File a quota request (team members and leads). It changes only what it names: a limit
    left UNSET keeps the team's value (None asks for no limit). A decrease filed by a lead of
    the team (or a manager of its department, or a platform admin) takes effect at once;
    anyone else's is a request like any other. `on_behalf`: a manager of the team's department
    files it (a what-if proposal applied), to be decided like any other."""
    allowed = user_can_request(user=actor, team=team) or (
        on_behalf and user_manages_team(user=actor, team=team)
    )
    if not allowed:
        raise PermissionDenied("Only members and leads of the team can ask for its quota.")
    quota = Quota.objects.filter(team=team, pool=pool).first() if pool is not None else None
    nominal, borrowing, lending, errors = _validate_numbers(
        team=team, nominal=nominal_gpus, borrowing=borrowing_limit, lending=lending_limit
    )
    if pool is None:
        errors["pool"] = "Choose a pool."
    if ends_at is not None and ends_at <= timezone.now():
        errors["ends_at"] = "The end date of a burst grant must be in the future."
    justification = (justification or "").strip()
    decrease = (
        not errors
        and _is_decrease(quota, nominal, borrowing, lending)
        and _lead_or_above(actor, team)
    )
    if not justification and not decrease:
        errors["justification"] = "Say what the GPUs are for, so the manager can decide."
    room = None
    if not errors and not pool.allow_oversubscription:
        room = pool_capacity(pool=pool, exclude_team=team)
        if room["capacity"] and nominal > room["capacity"]:
            errors["nominal_gpus"] = (
                f"{pool.name} has {room['capacity']} GPUs in all: ask for at most "
                f"{room['capacity']} (and at most {max(0, room['left'])} fit beside the other "
                "teams' quota now)."
            )
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        quota_request = QuotaRequest.objects.create(
            team=team,
            pool=pool,
            requested_by=actor,
            nominal_gpus=nominal,
            borrowing_limit=None if borrowing is UNSET else borrowing,
            lending_limit=None if lending is UNSET else lending,
            sets_borrowing_limit=borrowing is not UNSET,
            sets_lending_limit=lending is not UNSET,
            ends_at=ends_at,
            justification=justification or "Decrease.",
        )
        audit(
            actor=actor,
            verb="quota_request.create",
            obj=quota_request,
            team=team,
            before=_quota_values(quota),
            after=_asked_values(quota_request),
            message=f"{actor} asked for {count(nominal, 'GPU')} in {pool.name} for {team.name}.",
        )
        auto = None if decrease else _decided_on_filing(quota_request, quota)
        if auto is not None:
            approved, why, figures = auto
            audit(actor=None, verb="quota_request.auto_approve" if approved else
                  "quota_request.auto_check", obj=quota_request, team=team, after=figures,
                  message=why)  # fmt: skip
            if approved:
                locked = _lock_pending(quota_request.pk)
                quota, new = _quota_for_update(locked)
                return _grant(locked, quota, new=new, approver=None,
                              values=(nominal, borrowing, lending), reason=why)  # fmt: skip
        if not decrease:
            _tell_approvers(quota_request)
        if decrease:
            locked = _lock_pending(quota_request.pk)
            quota, new = _quota_for_update(locked)
            quota_request = _grant(
                locked,
                quota,
                new=new,
                approver=None,
                values=(nominal, borrowing, lending),
                reason="A decrease: approved automatically.",
            )
    if room is not None and room["capacity"] and nominal > room["left"]:
        # Filed, but the manager can only grant it if other teams' quota shrinks first.
        quota_request.capacity_warning = (
            f"{count(nominal, 'GPU')} is more than the {max(0, room['left'])} left for "
            f"{team.name} in {pool.name} beside the other teams' quota: it can only be granted "
            "in full if theirs shrinks, or trimmed."
        )
    return quota_request


def _asked_values(quota_request: QuotaRequest) -> dict:
    """What a request asks, without the limits it leaves as they are."""
    asked = {"nominal_gpus": quota_request.nominal_gpus}
    if quota_request.sets_borrowing_limit:
        asked["borrowing_limit"] = quota_request.borrowing_limit
    if quota_request.sets_lending_limit:
        asked["lending_limit"] = quota_request.lending_limit
    return asked


def _asked_limits(quota_request: QuotaRequest) -> tuple:
    """(borrowing, lending) as asked; UNSET for a limit the request leaves as it is."""
    return (
        quota_request.borrowing_limit if quota_request.sets_borrowing_limit else UNSET,
        quota_request.lending_limit if quota_request.sets_lending_limit else UNSET,
    )


def _decided_on_filing(quota_request: QuotaRequest, quota: Quota | None):
    """The first decision a quota_request_filed receiver gives, or None."""
    answers = quota_request_filed.send(
        sender=QuotaRequest, quota_request=quota_request, quota=quota
    )
    return next((answer for _receiver, answer in answers if answer is not None), None)


# -- deciding ----------------------------------------------------------------------------------


def _require_approver(quota_request: QuotaRequest, user) -> None:
    approvers = quota_request_approvers(quota_request=quota_request)
    if not approvers.includes(user):
        raise PermissionDenied(approvers.refusal(user))


def _lock_pending(quota_request_id: int) -> QuotaRequest:
    """The request, locked for the decision; a clean error when someone decided it meanwhile."""
    quota_request = (
        QuotaRequest.objects.select_for_update(of=("self",))
        .select_related("team__department", "pool__cluster", "requested_by")
        .get(pk=quota_request_id)
    )
    if quota_request.state != State.PENDING:
        raise ValidationError(
            f"This request is already {quota_request.get_state_display().lower()}"
            + (f" by {quota_request.decided_by}" if quota_request.decided_by_id else "")
            + "; nothing was changed."
        )
    return quota_request


def quota_request_approve(
    *,
    quota_request: QuotaRequest,
    approver,
    nominal_gpus=UNSET,
    borrowing_limit=UNSET,
    lending_limit=UNSET,
    reason: str = "",
) -> QuotaRequest:
    """Approve a pending request, optionally trimmed; updates the Quota and reconciles.

    A number left UNSET is granted as requested; a given one (None meaning "no limit" for the
    borrowing and lending limits) must not exceed what was asked. A limit the request does not
    name is not the decision's to change: the team keeps its value.
    """
    _require_approver(quota_request, approver)

    def pick(given, asked):
        return asked if given is UNSET else given

    asked_borrowing, asked_lending = _asked_limits(quota_request)
    errors = {}
    for name, given, asked in (("borrowing_limit", borrowing_limit, asked_borrowing),
                               ("lending_limit", lending_limit, asked_lending)):  # fmt: skip
        if asked is UNSET and given is not UNSET:
            errors[name] = (
                f"The request leaves the team's {name.replace('_', ' ')} as it is; a decision "
                "changes only what was asked (the team may file a request for it)."
            )
    if errors:
        raise ValidationError(errors)
    nominal, borrowing, lending, errors = _validate_numbers(
        team=quota_request.team,
        nominal=pick(nominal_gpus, quota_request.nominal_gpus),
        borrowing=pick(borrowing_limit, asked_borrowing),
        lending=pick(lending_limit, asked_lending),
    )
    if nominal is not None and nominal > quota_request.nominal_gpus:
        errors["nominal_gpus"] = (
            f"Grant at most the {count(quota_request.nominal_gpus, 'GPU')} asked for."
        )
    asked_borrowing = quota_request.borrowing_limit if quota_request.sets_borrowing_limit else None
    too_much = borrowing is None or borrowing is UNSET or borrowing > (asked_borrowing or 0)
    if asked_borrowing is not None and "borrowing_limit" not in errors and too_much:
        errors["borrowing_limit"] = (
            f"Grant a borrowing limit of at most the {asked_borrowing} asked for."
        )
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        locked = _lock_pending(quota_request.pk)
        quota, new = _quota_for_update(locked)
        _check_capacity(locked, quota, nominal)
        return _grant(
            locked,
            quota,
            new=new,
            approver=approver,
            values=(nominal, borrowing, lending),
            reason=reason,
        )


def quota_request_reject(*, quota_request: QuotaRequest, approver, reason: str) -> QuotaRequest:
    """Reject a pending request with a reason the team can read."""
    _require_approver(quota_request, approver)
    reason = (reason or "").strip()
    if not reason:
        raise ValidationError({"reason": "Tell the team why, so they can ask better next time."})
    with transaction.atomic():
        locked = _lock_pending(quota_request.pk)
        locked.state = State.REJECTED
        locked.decided_by, locked.decided_at = approver, timezone.now()
        locked.decision_reason = reason
        locked.save()
        audit(
            actor=approver,
            verb="quota_request.reject",
            obj=locked,
            team=locked.team,
            message=f"Rejected: {reason}",
        )
        _notify(
            locked,
            f"Quota request for {locked.team.name} rejected",
            f"{approver} rejected your request for {count(locked.nominal_gpus, 'GPU')} in "
            f"{locked.pool.name}.\n\nReason: {reason}\n",
        )
    return locked


def _quota_for_update(quota_request: QuotaRequest) -> tuple[Quota, bool]:
    """The team's quota row in the pool, locked, and whether it was created just now."""
    return Quota.objects.select_for_update().get_or_create(
        team=quota_request.team, pool=quota_request.pool
    )


def _check_capacity(quota_request: QuotaRequest, quota: Quota, nominal: int) -> None:
    """An increase must fit in what the pool has left after the other teams' quota."""
    pool = quota_request.pool
    if nominal <= quota.nominal_gpus or pool.allow_oversubscription:
        return
    capacity = pool_capacity(pool=pool, exclude_team=quota_request.team)
    if nominal <= capacity["left"]:
        return
    excess = nominal - capacity["left"]
    raise ValidationError(
        {
            "nominal_gpus": (
                f"Granting {count(nominal, 'GPU')} would exceed {pool.name}'s capacity by "
                f"{excess} GPU{'s' if excess != 1 else ''}: the pool has "
                f"{count(capacity['capacity'], 'GPU')} and {capacity['granted']} are already "
                f"granted to other teams. Trim to at most {max(0, capacity['left'])}."
            )
        }
    )


def _grant(
    quota_request: QuotaRequest, quota: Quota, *, new: bool, approver, values, reason
) -> QuotaRequest:
    """Give the team the granted numbers (in a transaction, both rows locked): the quota (with
    its base kept for a burst; `new`: the row did not exist before), the request's decision,
    audit, and the apply to wait for. A limit given as UNSET keeps the quota's value, except
    that a team cannot lend more than its nominal quota: a kept lending limit above it is
    lowered to it."""
    nominal, borrowing, lending = values
    borrowing = quota.borrowing_limit if borrowing is UNSET else borrowing
    if lending is UNSET:
        lending = (
            quota.lending_limit
            if quota.lending_limit is None
            else min(quota.lending_limit, nominal)
        )
    before = None if new else _quota_values(quota)
    if quota_request.ends_at:
        if quota.ends_at is None:
            quota.base_nominal_gpus = quota.nominal_gpus
            quota.base_borrowing_limit = quota.borrowing_limit
            quota.base_lending_limit = quota.lending_limit
            quota.base_absent = new
        quota.ends_at = quota_request.ends_at
    else:
        quota.ends_at = None
        quota.base_nominal_gpus = quota.base_borrowing_limit = quota.base_lending_limit = None
        quota.base_absent = False
    quota.nominal_gpus, quota.borrowing_limit, quota.lending_limit = nominal, borrowing, lending
    quota.save()
    quota_request.state = State.APPROVED
    quota_request.decided_by, quota_request.decided_at = approver, timezone.now()
    quota_request.decision_reason = reason or ""
    quota_request.granted_nominal_gpus = nominal
    quota_request.granted_borrowing_limit = borrowing
    quota_request.granted_lending_limit = lending
    quota_request.save()
    trimmed = values != (quota_request.nominal_gpus, *_asked_limits(quota_request))
    audit(
        actor=approver,
        verb="quota_request.approve",
        obj=quota_request,
        team=quota_request.team,
        after={"nominal_gpus": nominal, "borrowing_limit": borrowing, "lending_limit": lending},
        message=("Approved (trimmed)" if trimmed else "Approved")
        + (f": {reason}" if reason else "."),
    )
    burst = quota_request.ends_at
    audit(
        actor=approver,
        verb="quota.change",
        obj=quota,
        team=quota_request.team,
        before=before,
        after=_quota_values(quota),
        message=f"Quota request #{quota_request.pk}"
        + (f", a burst until {burst:%Y-%m-%d %H:%M} UTC" if burst else ""),
    )
    _await_apply(quota_request)
    _notify(
        quota_request,
        f"Quota request for {quota_request.team.name} approved",
        f"{approver or 'Quartermaster'} approved {count(nominal, 'GPU')} in "
        f"{quota_request.pool.name}"
        + (" (trimmed from your request)" if trimmed else "")
        + ". You will get another e-mail when the cluster has applied it.\n",
    )
    return quota_request


def _await_apply(quota_request: QuotaRequest) -> None:
    """Render the new desired state now and remember which generation carries this decision;
    the reconcile that applies it settles the request."""
    cluster = quota_request.pool.cluster
    managed_objects_sync(cluster=cluster)
    row = ManagedObject.objects.filter(
        cluster=cluster,
        kind__in=QUEUE_KINDS,
        namespace="",
        name=cluster_queue_name(quota_request.team),
    ).first()
    if row is None:
        return
    quota_request.awaiting_generation = row.desired_generation
    quota_request.save(update_fields=["awaiting_generation"])
    if row.applied_generation >= row.desired_generation:
        quota_requests_settle(cluster_id=cluster.pk)
    else:
        reconcile_cluster_enqueue(cluster.pk)


def quota_requests_settle(*, cluster_id: int) -> dict[str, int]:
    """Bring approved (and failed) requests of the cluster's teams up to date with the queue
    objects that carry them (the team's queue and, on Volcano, the pool's queue): applied once
    the cluster accepted a generation of the team's queue that carries the decision and refuses
    none of them, failed while it refuses one (with what it said). Idempotent; the reconcile
    tasks call it after applying.

    A failed request turns applied when a later apply carries its quota after all (e.g. once an
    admin fixed what the cluster refused)."""
    rows = {
        row.name: row
        for row in ManagedObject.objects.filter(
            cluster_id=cluster_id, kind__in=QUEUE_KINDS, owner_type=OWNER_TEAM, namespace=""
        ).only(
            "name", "applied_generation", "desired_generation", "failed_generation", "last_error"
        )
    }
    waiting = QuotaRequest.objects.filter(
        Q(state=State.APPROVED) | Q(state=State.FAILED),
        pool__cluster_id=cluster_id,
        awaiting_generation__isnull=False,
    ).select_related("team", "pool")
    applied, failed = [], {}
    for request in waiting:
        main_name, pool_name = quota_request_queue_names(request)
        main = rows.get(main_name)
        if main is None:
            continue
        carrying = [main, rows[pool_name]] if pool_name in rows else [main]
        refused = [
            row for row in carrying
            if row.failed_generation is not None
            and row.failed_generation >= (request.awaiting_generation if row is main
                                          else row.desired_generation)
        ]  # fmt: skip
        if main.applied_generation >= request.awaiting_generation and not refused:
            applied.append(request.pk)
        elif request.state == State.APPROVED and refused:
            failed[request.pk] = refused[0].last_error
    _mark_applied(applied)
    for pk, error in failed.items():
        _mark_failed(pk, error)
    return {"applied": len(applied), "failed": len(failed)}


def _settled_requests(ids, states):
    return (
        QuotaRequest.objects.select_for_update()
        .select_related("team__department", "pool", "requested_by")
        .filter(pk__in=ids, state__in=states)
    )


def _mark_applied(ids: list[int]) -> None:
    if not ids:
        return
    with transaction.atomic():
        for quota_request in _settled_requests(ids, (State.APPROVED, State.FAILED)):
            quota_request.state = State.APPLIED
            quota_request.applied_at, quota_request.apply_error = timezone.now(), ""
            quota_request.save()
            audit(
                actor=None,
                verb="quota_request.applied",
                obj=quota_request,
                team=quota_request.team,
                message="The cluster accepted the new quota.",
            )
            _notify(
                quota_request,
                f"Quota for {quota_request.team.name} is live",
                f"{count(quota_request.granted_nominal_gpus, 'GPU')} in "
                f"{quota_request.pool.name} are now your team's quota in the cluster.\n",
            )


def _mark_failed(pk: int, error: str) -> None:
    with transaction.atomic():
        for quota_request in _settled_requests([pk], (State.APPROVED,)):
            quota_request.state, quota_request.apply_error = State.FAILED, error
            quota_request.save()
            audit(
                actor=None,
                verb="quota_request.failed",
                obj=quota_request,
                team=quota_request.team,
                message=error,
            )
            _notify(
                quota_request,
                f"Quota for {quota_request.team.name} could not be applied",
                f"The cluster refused the new quota in {quota_request.pool.name}:\n\n{error}\n\n"
                "A platform admin has been told; the request shows the details.",
            )


def quota_request_can_cancel(*, user, quota_request: QuotaRequest) -> bool:
    """Its requester and the team's leads may withdraw a request."""
    return quota_request.requested_by_id == user.pk or user_is_team_lead(
        user=user, team=quota_request.team
    )


def quota_request_cancel(*, quota_request: QuotaRequest, actor) -> QuotaRequest:
    """The requester (or a team lead) withdraws a pending request."""
    if not quota_request_can_cancel(user=actor, quota_request=quota_request):
        raise PermissionDenied("Only who filed the request or a lead of the team can withdraw it.")
    with transaction.atomic():
        locked = QuotaRequest.objects.select_for_update().get(pk=quota_request.pk)
        if locked.state != State.PENDING:
            raise ValidationError(f"This request is already {locked.get_state_display().lower()}.")
        locked.state = State.CANCELLED
        locked.save(update_fields=["state"])
        audit(actor=actor, verb="quota_request.cancel", obj=locked, team=locked.team)
    return locked


# -- burst grants ------------------------------------------------------------------------------


def quota_bursts_expire(*, now: dt.datetime | None = None) -> list[int]:
    """Revert every burst grant whose end has passed to its base quota; returns quota ids."""
    now = now or timezone.now()
    expired, clusters = [], set()
    with transaction.atomic():
        for quota in (
            Quota.objects.select_for_update()
            .select_related("team__department", "pool")
            .filter(ends_at__lte=now)
        ):
            before = _quota_values(quota)
            expired.append(quota.pk)
            if quota.base_absent:
                # The team had no quota here before: the burst leaves nothing behind, not a
                # row of zeros with unlimited borrowing.
                audit(
                    actor=None,
                    verb="quota.burst_expired",
                    obj=quota,
                    team=quota.team,
                    before=before,
                    after=_quota_values(None),
                    message=f"The burst grant in {quota.pool.name} ended; the team had no "
                    "quota there before, so it has none now.",
                )
                quota.delete()
                clusters.add(quota.pool.cluster_id)
                continue
            quota.nominal_gpus = quota.base_nominal_gpus or 0
            quota.borrowing_limit = quota.base_borrowing_limit
            quota.lending_limit = quota.base_lending_limit
            quota.ends_at = None
            quota.base_nominal_gpus = quota.base_borrowing_limit = quota.base_lending_limit = None
            quota.save()
            audit(
                actor=None,
                verb="quota.burst_expired",
                obj=quota,
                team=quota.team,
                before=before,
                after=_quota_values(quota),
                message=f"The burst grant in {quota.pool.name} ended; back to the base quota.",
            )
            clusters.add(quota.pool.cluster_id)
        for cluster_id in clusters:
            reconcile_cluster_enqueue(cluster_id)
    return expired
