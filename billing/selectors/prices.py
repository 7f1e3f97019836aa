"""Price-book reads: the price list with its history, and the prices in force over a period."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Q, QuerySet

from billing.pricing import PriceBook
from fleet.models import GpuPrice


def price_list(*, user) -> QuerySet[GpuPrice]:
    """The whole price book with its history (every signed-in user may read prices)."""
    return GpuPrice.objects.select_related("gpu_model", "created_by").order_by(
        "gpu_model__name", "mig_profile", "-effective_from"
    )


def price_book_for(*, start: datetime, end: datetime) -> PriceBook:
    """The prices in force at some moment of [start, end), indexed for hourly lookups."""
    return PriceBook(
        GpuPrice.objects.filter(
            Q(effective_to__isnull=True) | Q(effective_to__gt=start), effective_from__lt=end
        )
    )
