"""Writes for quota governance: quota requests and decisions, burst expiry, queue holds, tiers.

Every decision and quota change leaves an AuditEvent. Nothing here calls Kubernetes: after the
database commit a reconcile of the cluster is enqueued, and the reconciler reports back through
`quota_request_apply_result`.
"""

from __future__ import annotations

import datetime as dt
import logging

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.mail import send_mail
from django.db import transaction
from django.utils import timezone

from fleet.models import NodePool
from queues.manifests import cluster_queue_name
from queues.models import (
    AuditEvent,
    Department,
    ManagedObject,
    PriorityTier,
    Quota,
    QuotaRequest,
    Team,
)
from queues.roles import is_platform_admin
from queues.selectors.governance import pool_capacity, user_can_decide, user_can_request

logger = logging.getLogger(__name__)

State = QuotaRequest.State


# -- audit -------------------------------------------------------------------------------------


def audit(
    *,
    actor,
    verb: str,
    obj,
    team: Team | None = None,
    department: Department | None = None,
    before=None,
    after=None,
    manifest_diff: str = "",
    message: str = "",
) -> AuditEvent:
    """Record who did what to which object (with before/after and a manifest diff)."""
    if department is None and team is not None:
        department = team.department
    return AuditEvent.objects.create(
        actor=actor if actor is not None and actor.is_authenticated else None,
        verb=verb,
        object_type=obj._meta.model_name if obj is not None else "",
        object_id=str(obj.pk) if obj is not None and obj.pk is not None else "",
        object_repr=str(obj)[:255] if obj is not None else "",
        team=team,
        department=department,
        before=before,
        after=after,
        manifest_diff=manifest_diff,
        message=message,
    )


def _quota_values(quota: Quota | None) -> dict:
    if quota is None:
        return {"nominal_gpus": 0, "borrowing_limit": None, "lending_limit": None}
    return {
        "nominal_gpus": quota.nominal_gpus,
        "borrowing_limit": quota.borrowing_limit,
        "lending_limit": quota.lending_limit,
        "ends_at": quota.ends_at.isoformat() if quota.ends_at else None,
    }


def _notify(request: QuotaRequest, subject: str, body: str) -> None:
    """E-mail the requester after the transaction commits (a failed mail never undoes work)."""
    address = request.requested_by.email
    if not address:
        return

    def send():
        try:
            send_mail(
                f"[Quartermaster] {subject}",
                body,
                settings.DEFAULT_FROM_EMAIL,
                [address],
                fail_silently=False,
            )
        except Exception:  # noqa: BLE001 - mail trouble is logged, the decision stands
            logger.exception("could not e-mail %s about quota request %s", address, request.pk)

    transaction.on_commit(send)


def _enqueue_reconcile(cluster_id: int) -> None:
    # reconcile imports this module (audit, apply results), so its names are imported late.
    from queues.services.reconcile import reconcile_cluster_enqueue

    reconcile_cluster_enqueue(cluster_id)


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
    errors: dict[str, str] = {}
    nominal = _int_field(errors, nominal_field, nominal, minimum=1, required=True)
    borrowing = _int_field(errors, "borrowing_limit", borrowing, minimum=0, required=False)
    lending = _int_field(errors, "lending_limit", lending, minimum=0, required=False)
    if nominal is not None and lending is not None and lending > nominal:
        errors["lending_limit"] = (
            f"The lending limit ({lending}) cannot exceed the nominal quota ({nominal}): "
            "a team can only lend GPUs it has."
        )
    if borrowing is not None and team.department_id is None:
        # Borrowing happens within a cohort (Kueue) or a parent queue (Volcano): departments.
        errors["borrowing_limit"] = (
            "This team belongs to no department, so there is no cohort to borrow from."
        )
    return nominal, borrowing, lending, errors


def _is_decrease(quota: Quota | None, nominal, borrowing, lending) -> bool:
    """Every requested number is at most the current one (no limit counts as infinite)."""
    if quota is None:
        return False

    def le(new, current):
        if current is None:
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
    borrowing_limit=None,
    lending_limit=None,
    ends_at: dt.datetime | None = None,
    justification: str = "",
) -> QuotaRequest:
    """File a quota request (team members and leads); decreases are approved at once."""
    if not user_can_request(user=actor, team=team):
        raise PermissionDenied("Only members and leads of the team can ask for its quota.")
    nominal, borrowing, lending, errors = _validate_numbers(
        team=team, nominal=nominal_gpus, borrowing=borrowing_limit, lending=lending_limit
    )
    if pool is None:
        errors["pool"] = "Choose a pool."
    if ends_at is not None and ends_at <= timezone.now():
        errors["ends_at"] = "The end date of a burst grant must be in the future."
    justification = (justification or "").strip()
    quota = Quota.objects.filter(team=team, pool=pool).first() if pool is not None else None
    decrease = not errors and _is_decrease(quota, nominal, borrowing, lending)
    if not justification and not decrease:
        errors["justification"] = "Say what the GPUs are for, so the manager can decide."
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        request = QuotaRequest.objects.create(
            team=team,
            pool=pool,
            requested_by=actor,
            nominal_gpus=nominal,
            borrowing_limit=borrowing,
            lending_limit=lending,
            ends_at=ends_at,
            justification=justification or "Decrease.",
        )
        audit(
            actor=actor,
            verb="quota_request.create",
            obj=request,
            team=team,
            before=_quota_values(quota),
            after={"nominal_gpus": nominal, "borrowing_limit": borrowing, "lending_limit": lending},
            message=f"{actor} asked for {nominal} GPUs in {pool.name} for {team.name}.",
        )
        if decrease:
            _decide(
                request_id=request.pk,
                approver=None,
                approve=True,
                nominal=nominal,
                borrowing=borrowing,
                lending=lending,
                reason="A decrease: approved automatically.",
            )
            request.refresh_from_db()
    return request


# -- deciding ----------------------------------------------------------------------------------


UNSET = object()


def quota_request_approve(
    *,
    request: QuotaRequest,
    approver,
    nominal_gpus=UNSET,
    borrowing_limit=UNSET,
    lending_limit=UNSET,
    reason: str = "",
) -> QuotaRequest:
    """Approve a pending request, optionally trimmed; updates the Quota and reconciles.

    A number left UNSET is granted as requested; a given one (None meaning "no limit" for the
    borrowing and lending limits) must not exceed what was asked.
    """
    if not user_can_decide(user=approver, request=request):
        raise PermissionDenied("Only a manager of the team's department can decide this request.")

    def pick(given, asked):
        return asked if given is UNSET else given

    nominal, borrowing, lending, errors = _validate_numbers(
        team=request.team,
        nominal=pick(nominal_gpus, request.nominal_gpus),
        borrowing=pick(borrowing_limit, request.borrowing_limit),
        lending=pick(lending_limit, request.lending_limit),
    )
    if nominal is not None and nominal > request.nominal_gpus:
        errors["nominal_gpus"] = f"Grant at most the {request.nominal_gpus} GPUs asked for."
    too_much = borrowing is None or borrowing > (request.borrowing_limit or 0)
    if request.borrowing_limit is not None and "borrowing_limit" not in errors and too_much:
        errors["borrowing_limit"] = (
            f"Grant a borrowing limit of at most the {request.borrowing_limit} asked for."
        )
    if errors:
        raise ValidationError(errors)
    return _decide(
        request_id=request.pk,
        approver=approver,
        approve=True,
        nominal=nominal,
        borrowing=borrowing,
        lending=lending,
        reason=reason,
    )


def quota_request_reject(*, request: QuotaRequest, approver, reason: str) -> QuotaRequest:
    """Reject a pending request with a reason the team can read."""
    if not user_can_decide(user=approver, request=request):
        raise PermissionDenied("Only a manager of the team's department can decide this request.")
    reason = (reason or "").strip()
    if not reason:
        raise ValidationError({"reason": "Tell the team why, so they can ask better next time."})
    return _decide(request_id=request.pk, approver=approver, approve=False, reason=reason)


def _decide(
    *, request_id: int, approver, approve: bool, nominal=None, borrowing=None, lending=None, reason
) -> QuotaRequest:
    with transaction.atomic():
        request = (
            QuotaRequest.objects.select_for_update()
            .select_related("team__department", "pool", "requested_by")
            .get(pk=request_id)
        )
        if request.state != State.PENDING:
            raise ValidationError(
                f"This request is already {request.get_state_display().lower()}"
                + (f" by {request.decided_by}" if request.decided_by_id else "")
                + "; nothing was changed."
            )
        request.decided_by = approver
        request.decided_at = timezone.now()
        request.decision_reason = reason or ""
        if not approve:
            request.state = State.REJECTED
            request.save()
            audit(
                actor=approver,
                verb="quota_request.reject",
                obj=request,
                team=request.team,
                message=f"Rejected: {reason}",
            )
            _notify(
                request,
                f"Quota request for {request.team.name} rejected",
                f"{approver} rejected your request for {request.nominal_gpus} GPUs in "
                f"{request.pool.name}.\n\nReason: {reason}\n",
            )
            return request
        quota, _ = Quota.objects.select_for_update().get_or_create(
            team=request.team, pool=request.pool
        )
        before = _quota_values(quota)
        capacity = pool_capacity(pool=request.pool, exclude_team=request.team)
        if (
            approver is not None
            and nominal > quota.nominal_gpus
            and not request.pool.allow_oversubscription
            and nominal > capacity["left"]
        ):
            excess = nominal - capacity["left"]
            raise ValidationError(
                {
                    "nominal_gpus": (
                        f"Granting {nominal} GPUs would exceed {request.pool.name}'s capacity by "
                        f"{excess} GPU{'s' if excess != 1 else ''}: the pool has "
                        f"{capacity['capacity']} GPUs and {capacity['granted']} are already "
                        f"granted to other teams. Trim to at most {max(0, capacity['left'])}."
                    )
                }
            )
        if request.ends_at:
            if quota.ends_at is None:
                quota.base_nominal_gpus = quota.nominal_gpus
                quota.base_borrowing_limit = quota.borrowing_limit
                quota.base_lending_limit = quota.lending_limit
            quota.ends_at = request.ends_at
        else:
            quota.ends_at = None
            quota.base_nominal_gpus = quota.base_borrowing_limit = quota.base_lending_limit = None
        quota.nominal_gpus, quota.borrowing_limit, quota.lending_limit = nominal, borrowing, lending
        quota.save()
        request.state = State.APPROVED
        request.granted_nominal_gpus = nominal
        request.granted_borrowing_limit = borrowing
        request.granted_lending_limit = lending
        request.save()
        trimmed = (nominal, borrowing, lending) != (
            request.nominal_gpus,
            request.borrowing_limit,
            request.lending_limit,
        )
        audit(
            actor=approver,
            verb="quota_request.approve",
            obj=request,
            team=request.team,
            after={"nominal_gpus": nominal, "borrowing_limit": borrowing, "lending_limit": lending},
            message=("Approved (trimmed)" if trimmed else "Approved")
            + (f": {reason}" if reason else "."),
        )
        audit(
            actor=approver,
            verb="quota.change",
            obj=quota,
            team=request.team,
            before=before,
            after=_quota_values(quota),
            message=f"Quota request #{request.pk}"
            + (f", a burst until {request.ends_at:%Y-%m-%d %H:%M} UTC" if request.ends_at else ""),
        )
        _await_apply(request)
        who = approver or "Quartermaster"
        _notify(
            request,
            f"Quota request for {request.team.name} approved",
            f"{who} approved {nominal} GPUs in {request.pool.name}"
            + (" (trimmed from your request)" if trimmed else "")
            + ". You will get another e-mail when the cluster has applied it.\n",
        )
    return request


def _await_apply(request: QuotaRequest) -> None:
    """Render the new desired state now and remember which generation carries this decision."""
    from queues.services.reconcile import managed_objects_sync

    cluster = request.pool.cluster
    managed_objects_sync(cluster=cluster)
    kind = "Queue" if cluster.scheduler == "volcano" else "ClusterQueue"
    row = ManagedObject.objects.filter(
        cluster=cluster, kind=kind, namespace="", name=cluster_queue_name(request.team)
    ).first()
    if row is None:
        return
    request.awaiting_generation = row.desired_generation
    request.save(update_fields=["awaiting_generation"])
    if row.applied_generation >= row.desired_generation:
        _mark_applied([request.pk], error="")
    else:
        _enqueue_reconcile(cluster.pk)


def quota_request_apply_result(*, team_id: int, cluster_id: int, generation: int, error: str):
    """The reconciler applied (or failed to apply) a team's queue at `generation`.

    A failed request turns applied when a later apply carries its quota after all (e.g. once
    an admin fixed what the cluster refused).
    """
    states = [State.APPROVED] if error else [State.APPROVED, State.FAILED]
    ids = list(
        QuotaRequest.objects.filter(
            team_id=team_id,
            pool__cluster_id=cluster_id,
            state__in=states,
            awaiting_generation__lte=generation,
        ).values_list("pk", flat=True)
    )
    _mark_applied(ids, error=error, states=states)


def _mark_applied(ids: list[int], *, error: str, states=(State.APPROVED,)) -> None:
    with transaction.atomic():
        for request in (
            QuotaRequest.objects.select_for_update()
            .select_related("team__department", "pool", "requested_by")
            .filter(pk__in=ids, state__in=states)
        ):
            if error:
                request.state, request.apply_error = State.FAILED, error
                subject = f"Quota for {request.team.name} could not be applied"
                body = (
                    f"The cluster refused the new quota in {request.pool.name}:\n\n{error}\n\n"
                    "A platform admin has been told; the request shows the details."
                )
            else:
                request.state, request.applied_at, request.apply_error = (
                    State.APPLIED,
                    timezone.now(),
                    "",
                )
                subject = f"Quota for {request.team.name} is live"
                body = (
                    f"{request.granted_nominal_gpus} GPUs in {request.pool.name} are now "
                    "your team's quota in the cluster.\n"
                )
            request.save()
            audit(
                actor=None,
                verb="quota_request.failed" if error else "quota_request.applied",
                obj=request,
                team=request.team,
                message=error or "The cluster accepted the new quota.",
            )
            _notify(request, subject, body)


def quota_request_cancel(*, request: QuotaRequest, actor) -> QuotaRequest:
    """The requester (or a team lead) withdraws a pending request."""
    if not user_can_request(user=actor, team=request.team):
        raise PermissionDenied("Only the team can withdraw its request.")
    with transaction.atomic():
        request = QuotaRequest.objects.select_for_update().get(pk=request.pk)
        if request.state != State.PENDING:
            raise ValidationError(f"This request is already {request.get_state_display().lower()}.")
        request.state = State.CANCELLED
        request.save(update_fields=["state"])
        audit(actor=actor, verb="quota_request.cancel", obj=request, team=request.team)
    return request


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
            expired.append(quota.pk)
            clusters.add(quota.pool.cluster_id)
        for cluster_id in clusters:
            _enqueue_reconcile(cluster_id)
    return expired


# -- queue holds (billing's budget enforcement) ------------------------------------------------


def team_queue_hold(*, team: Team, reason: str | None, actor=None) -> Team:
    """Hold (reason given) or release (None/"") a team's queues; running jobs finish."""
    from queues.services.reconcile import reconcile_all_enqueue

    reason = (reason or "").strip()[:300]
    with transaction.atomic():
        team = Team.objects.select_for_update().select_related("department").get(pk=team.pk)
        if team.queue_hold_reason == reason:
            return team
        before = {"queue_hold_reason": team.queue_hold_reason}
        team.queue_hold_reason = reason
        team.save(update_fields=["queue_hold_reason"])
        audit(
            actor=actor,
            verb="team.queue_hold" if reason else "team.queue_release",
            obj=team,
            team=team,
            before=before,
            after={"queue_hold_reason": reason},
            message=reason or "Queue released.",
        )
        reconcile_all_enqueue()
    return team


# -- priority tiers ----------------------------------------------------------------------------

TIER_FIELDS = ("name", "value", "preemptible", "is_default", "description")


def tier_save(*, actor, tier: PriorityTier | None = None, **fields) -> PriorityTier:
    """Create or change a priority tier (platform admins); reconciles every cluster."""
    from queues.services.reconcile import reconcile_all_enqueue

    if not is_platform_admin(actor):
        raise PermissionDenied("Only platform admins can change priority tiers.")
    unknown = set(fields) - set(TIER_FIELDS)
    if unknown:
        raise ValidationError(f"Unknown tier fields: {', '.join(sorted(unknown))}.")
    with transaction.atomic():
        creating = tier is None
        tier = (
            PriorityTier() if creating else PriorityTier.objects.select_for_update().get(pk=tier.pk)
        )
        before = None if creating else {f: getattr(tier, f) for f in TIER_FIELDS}
        for name, value in fields.items():
            setattr(tier, name, value)
        if tier.is_default:
            # One default tier: the new default replaces the old one.
            others = PriorityTier.objects.filter(is_default=True)
            if tier.pk:
                others = others.exclude(pk=tier.pk)
            others.update(is_default=False)
        tier.full_clean()
        tier.save()
        audit(
            actor=actor,
            verb="tier.create" if creating else "tier.change",
            obj=tier,
            before=before,
            after={f: getattr(tier, f) for f in TIER_FIELDS},
        )
        reconcile_all_enqueue()
    return tier
