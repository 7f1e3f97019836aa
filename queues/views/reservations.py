"""Web pages for advance reservations: the list with the lead time, requesting, deciding."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from core.forms import add_service_errors
from core.roles import is_platform_admin
from queues.forms.reservations import (
    ReservationDecisionForm,
    ReservationForm,
    ReservationSettingsForm,
)
from queues.models import Reservation, ReservationSettings
from queues.selectors import reservations as selectors
from queues.services import reservations as services


@login_required
def reservation_list(request):
    """The reservations of the teams I see, what waits for my decision, and the lead time."""
    settings_form = ReservationSettingsForm(
        request.POST or None, initial={"lead_minutes": ReservationSettings.current().lead_minutes}
    )
    if request.method == "POST":
        if not is_platform_admin(request.user):
            raise PermissionDenied("Only platform admins set the reservations' lead time.")
        if settings_form.is_valid():
            try:
                services.reservation_settings_update(
                    actor=request.user, **settings_form.cleaned_data
                )
            except ValidationError as exc:
                add_service_errors(settings_form, exc)
            else:
                messages.success(request, "Lead time saved.")
                return redirect("quota-reservations")
    reservations = selectors.reservation_list(user=request.user).order_by("-starts_at", "-pk")
    return render(
        request,
        "queues/reservations/list.html",
        {
            "reservations": reservations[:200],
            "awaiting": selectors.reservations_awaiting_decision(user=request.user),
            "can_request": selectors.teams_user_can_reserve_for(user=request.user).exists(),
            "settings_form": settings_form if is_platform_admin(request.user) else None,
            "lead_minutes": ReservationSettings.current().lead_minutes,
        },
    )


@login_required
def reservation_new(request):
    """A lead requests GPUs of a pool for a window."""
    teams = selectors.teams_user_can_reserve_for(user=request.user)
    if not teams.exists():
        raise PermissionDenied("Only team leads can reserve GPUs for their team.")
    form = ReservationForm(request.POST or None, teams=teams, initial={"team": teams.first()})
    if request.method == "POST" and form.is_valid():
        try:
            created = services.reservation_request(actor=request.user, **form.cleaned_data)
        except ValidationError as exc:
            add_service_errors(form, exc)
        else:
            messages.success(request, "Reservation requested; your department's managers decide.")
            return redirect("quota-reservation-detail", pk=created.pk)
    return render(request, "queues/reservations/form.html", {"form": form})


@login_required
def reservation_detail(request, pk):
    """One reservation: window, state, price by the team's policy, room in the pool; its
    approvers decide here."""
    try:
        reservation = selectors.reservation_get(user=request.user, pk=pk)
    except Reservation.DoesNotExist as exc:
        raise Http404("No such reservation.") from exc
    approvers = selectors.reservation_approvers(reservation=reservation)
    can_decide = reservation.state == Reservation.State.PENDING and approvers.includes(request.user)
    form = ReservationDecisionForm(request.POST or None)
    if request.method == "POST":
        if not can_decide:
            raise PermissionDenied(approvers.refusal(request.user))
        if form.is_valid():
            reason = form.cleaned_data["reason"]
            try:
                if "reject" in request.POST:
                    services.reservation_reject(
                        reservation=reservation, approver=request.user, reason=reason
                    )
                    messages.success(request, "Reservation rejected; the team has been told.")
                else:
                    services.reservation_approve(
                        reservation=reservation, approver=request.user, reason=reason
                    )
                    messages.success(request, "Reservation approved.")
            except ValidationError as exc:
                add_service_errors(form, exc)
            else:
                return redirect("quota-reservation-detail", pk=reservation.pk)
    room = selectors.reservation_room(
        pool=reservation.pool,
        starts_at=reservation.starts_at,
        ends_at=reservation.ends_at,
        exclude_id=reservation.pk,
    )
    return render(
        request,
        "queues/reservations/detail.html",
        {
            "r": reservation,
            "price": selectors.reservation_price(reservation=reservation),
            "room": room,
            "approvers": approvers.describe() if reservation.state == "pending" else "",
            "can_decide": can_decide,
            "can_cancel": selectors.reservation_can_cancel(
                user=request.user, reservation=reservation
            ),
            "form": form,
        },
    )


@login_required
@require_POST
def reservation_cancel(request, pk):
    try:
        reservation = selectors.reservation_get(user=request.user, pk=pk)
    except Reservation.DoesNotExist as exc:
        raise Http404("No such reservation.") from exc
    try:
        services.reservation_cancel(reservation=reservation, actor=request.user)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        messages.success(request, "Reservation cancelled.")
    return redirect("quota-reservation-detail", pk=reservation.pk)
