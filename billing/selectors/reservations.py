"""Reservations priced as held capacity: the GPUs a team booked, for the hours of its window,
at the price in force at each hour, by the team's billing policy.

Held capacity has no measured use of its own (the jobs that run in the reservation have their
own usage lines), so the policy weighs it as allocated-but-idle GPU time: `allocated` bills all
of it, `blend` its allocated share (w), `used` none of it. A line per reservation and month
carries everything finance needs to check it: the reservation, pool, GPUs, the part of the
window in the month, GPU-hours, the basis and the cost.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from decimal import Decimal

from django.db.models import Q
from django.utils import timezone

from billing.periods import month_bounds
from billing.pricing import PriceBook, billable_seconds, cents, cost_of, gpu_hours
from billing.selectors.prices import price_book_for
from billing.selectors.usage import policies_by_team
from queues.models import Reservation

HOUR = dt.timedelta(hours=1)
# Reservations whose window opened in the cluster: what is billed (a cancelled one up to its
# cancellation; one the beat only ever saw ended, when no worker ran in its window, is not).
BILLED = Q(
    state__in=(Reservation.State.ACTIVE, Reservation.State.ENDED, Reservation.State.CANCELLED),
    activated_at__isnull=False,
)


def _hour_floor(at: dt.datetime) -> dt.datetime:
    return at.replace(minute=0, second=0, microsecond=0)


def held_cost(
    *, reservation, start: dt.datetime, end: dt.datetime, book: PriceBook, policy
) -> dict:
    """The reservation's held GPUs in [start, end) ∩ its window, priced hour by hour."""
    lo, hi = max(start, reservation.starts_at), min(end, reservation.ends_at)
    basis, weight = policy or ("allocated", Decimal("0.5"))
    seconds, cost, currency, unpriced = 0, Decimal(0), "", 0
    at = lo
    while at < hi:
        step_end = min(_hour_floor(at) + HOUR, hi)
        held = reservation.gpus * int((step_end - at).total_seconds())
        price = book.at(
            reservation.pool.gpu_model_id, reservation.pool.mig_profile, _hour_floor(at)
        )
        seconds += held
        if price is None:
            unpriced += held
        else:
            billed = billable_seconds(allocated=held, used=0, basis=basis, blend_weight=weight)
            cost += cost_of(billed, price.price_per_hour)
            currency = currency or price.currency
        at = step_end
    return {
        "reservation_id": reservation.pk,
        "team": reservation.team.slug,
        "pool": reservation.pool.name,
        "gpus": reservation.gpus,
        "start": lo.isoformat() if lo < hi else None,
        "end": hi.isoformat() if lo < hi else None,
        "gpu_hours_held": str(gpu_hours(seconds)),
        "gpu_hours_unpriced": str(gpu_hours(unpriced)),
        "basis": basis,
        "blend_weight": str(weight) if basis == "blend" else None,
        "cost": str(cents(cost)),
        "currency": currency,
        "state": reservation.state,
    }


def reservation_quote(*, reservation) -> dict:
    """The whole window priced (the decision page, the API): what the team will be billed."""
    return reservation_quotes(reservations=[reservation])[reservation.pk]


HOW = {
    "allocated": "billed in full as allocated capacity",
    "blend": "billed at the blend's allocated share",
    "used": "not billed as held capacity: the team is billed by use, and held GPUs have none",
}


def reservation_quotes(*, reservations) -> dict[int, dict]:
    """Each reservation's whole window priced, in three queries however many there are."""
    reservations = list(reservations)
    if not reservations:
        return {}
    book = price_book_for(start=min(r.starts_at for r in reservations),
                          end=max(r.ends_at for r in reservations))  # fmt: skip
    policies = policies_by_team(sorted({r.team_id for r in reservations}))
    return {
        r.pk: held_cost(
            reservation=r,
            start=r.starts_at,
            end=r.ends_at,
            book=book,
            policy=policies.get(r.team_id),
        )  # fmt: skip
        for r in reservations
    }


def on_reservation_priced(sender, *, reservations, **kwargs) -> dict[int, dict]:
    """queues' `reservation_priced`: the quotes as its pages show them (priced ones only)."""
    out = {}
    for pk, quote in reservation_quotes(reservations=reservations).items():
        if not quote["currency"]:
            continue  # no price in the price book for any of its hours
        basis = quote["basis"]
        weight = f" ({quote['blend_weight']})" if basis == "blend" else ""
        out[pk] = {
            "amount": Decimal(quote["cost"]),
            "currency": quote["currency"],
            "gpu_hours": Decimal(quote["gpu_hours_held"]),
            "basis": basis,
            "explanation": f"{quote['gpu_hours_held']} GPU-hours held, {HOW[basis]}{weight} "
            f"(team policy: {basis}).",
        }
    return out


def reservations_month(
    *, month: dt.date, team_ids=None, now=None, book=None, policies=None
) -> dict[int, dict]:
    """Per team id: its reservations' lines in the month (held up to now) and their total.
    `book`, `policies`: the month's price book and the teams' policies, if already read."""
    start, end = month_bounds(month)
    end = min(end, now or timezone.now())
    qs = Reservation.objects.filter(BILLED, starts_at__lt=end, ends_at__gt=start).select_related(
        "team", "pool"
    )
    if team_ids is not None:
        qs = qs.filter(team_id__in=team_ids)
    reservations = list(qs.order_by("starts_at", "pk"))
    if not reservations:
        return {}
    book = book if book is not None else price_book_for(start=start, end=end)
    policies = policies if policies is not None else policies_by_team(team_ids)
    out: dict[int, dict] = defaultdict(lambda: {"lines": [], "charge": Decimal(0)})
    for r in reservations:
        line = held_cost(reservation=r, start=start, end=end, book=book,
                         policy=policies.get(r.team_id))  # fmt: skip
        out[r.team_id]["lines"].append(line)
        out[r.team_id]["charge"] += Decimal(line["cost"])
    return {
        team_id: {"lines": entry["lines"], "charge": str(entry["charge"])}
        for team_id, entry in out.items()
    }
