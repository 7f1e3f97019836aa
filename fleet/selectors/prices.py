"""Price-book lookups: the price of a GPU-hour in force at a time, and the monthly price of GPUs.

The price book is versioned by validity period: each GpuPrice row holds for the half-open
period [effective_from, effective_to) (an open end means "until further notice"), and rows of
the same GPU model and MIG profile never overlap (a PostgreSQL exclusion constraint, plus
`price_overlaps` checked by the services on every database). Old invoices therefore reproduce:
the price of an hour is the row whose period contains the hour's start.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from decimal import Decimal

from django.db.models import Q, QuerySet

from fleet.models import GpuModel, GpuPrice

# A month of GPU time for quota pricing: 365 days × 24 h / 12 months = 730 hours. Used for
# "what does this quota change cost per month"; invoices price the actual hours instead.
HOURS_PER_MONTH = 730


def _model_id(gpu_model: GpuModel | int) -> int:
    return gpu_model if isinstance(gpu_model, int) else gpu_model.pk


def _in_force(at: datetime) -> Q:
    return Q(effective_from__lte=at) & (Q(effective_to__isnull=True) | Q(effective_to__gt=at))


def price_in_force(
    *, gpu_model: GpuModel | int, at: datetime, mig_profile: str = ""
) -> GpuPrice | None:
    """The GpuPrice row of the model (and MIG profile) in force at `at`, or None."""
    return (
        GpuPrice.objects.filter(_in_force(at), gpu_model_id=_model_id(gpu_model))
        .filter(mig_profile=mig_profile)
        .order_by("-effective_from")
        .first()
    )


def monthly_price(
    *, gpu_model: GpuModel | int, gpus: int, at: datetime, mig_profile: str = ""
) -> tuple[Decimal, str] | None:
    """(price of `gpus` GPUs for a 730-hour month at the price in force at `at`, currency).

    Exact Decimal, rounded to cents; negative `gpus` (a quota decrease) gives a negative amount.
    None when the price book has no price for the model at that time.
    """
    price = price_in_force(gpu_model=gpu_model, at=at, mig_profile=mig_profile)
    if price is None:
        return None
    amount = (price.price_per_hour * HOURS_PER_MONTH * gpus).quantize(Decimal("0.01"))
    return amount, price.currency


def price_overlaps(
    *,
    gpu_model: GpuModel | int,
    mig_profile: str,
    effective_from: datetime,
    effective_to: datetime | None,
    exclude_id: int | None = None,
) -> QuerySet[GpuPrice]:
    """Rows of the same model and profile whose half-open period overlaps the given one."""
    qs = GpuPrice.objects.filter(gpu_model_id=_model_id(gpu_model), mig_profile=mig_profile)
    # [a, b) and [c, d) overlap when a < d and c < b (an open end is +infinity).
    qs = qs.filter(Q(effective_to__isnull=True) | Q(effective_to__gt=effective_from))
    if effective_to is not None:
        qs = qs.filter(effective_from__lt=effective_to)
    if exclude_id is not None:
        qs = qs.exclude(pk=exclude_id)
    return qs


def price_book_version(*, at: datetime | None = None) -> str:
    """A stable identifier of the price book's content (as known at `at`, default now).

    A digest over every row's model, profile, price, currency and period, prefixed with the row
    count: any edit of any row changes it, and the same content always gives the same version,
    so a closed report can tell whether it would still price the same today.
    """
    qs = GpuPrice.objects.order_by("pk")
    if at is not None:
        qs = qs.filter(created_at__lte=at)
    digest = hashlib.sha256()
    count = 0
    for row in qs.values_list(
        "pk",
        "gpu_model_id",
        "mig_profile",
        "price_per_hour",
        "currency",
        "effective_from",
        "effective_to",
    ):
        pk, model_id, profile, price, currency, start, end = row
        digest.update(
            f"{pk}|{model_id}|{profile}|{price.normalize()}|{currency}|"
            f"{start.isoformat()}|{end.isoformat() if end else ''}\n".encode()
        )
        count += 1
    return f"v{count}-{digest.hexdigest()[:12]}"
