"""The price book's writes: adding a GPU price, ending the open-ended one it replaces."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction

from billing.permissions import can_manage_billing
from fleet.models import GpuModel, GpuPrice
from fleet.selectors.prices import price_overlaps
from queues.services.audit import audit


def _check_price_editor(user) -> None:
    if not can_manage_billing(user):
        raise PermissionDenied("Only finance and platform admins edit the price book.")


def gpu_price_create(
    *,
    actor,
    gpu_model: GpuModel,
    price_per_hour: Decimal,
    effective_from: datetime,
    effective_to: datetime | None = None,
    currency: str = "EUR",
    mig_profile: str = "",
    note: str = "",
    close_previous: bool = True,
) -> GpuPrice:
    """Add a price; an open-ended price in force at `effective_from` is ended there."""
    _check_price_editor(actor)
    errors = {}
    if price_per_hour is None or price_per_hour < 0:
        errors["price_per_hour"] = "The price must be zero or more."
    if effective_to is not None and effective_to <= effective_from:
        errors["effective_to"] = "The end must be after the start."
    if len(currency or "") != 3 or not currency.isalpha():
        errors["currency"] = "Use a three-letter ISO 4217 code, e.g. EUR."
    else:
        book = (
            GpuPrice.objects.exclude(currency=currency.upper())
            .values_list("currency", flat=True)
            .first()
        )
        if book:
            errors["currency"] = (
                f"The price book is in {book}: enter this price in {book} too (reports add "
                "prices up, so one book has one currency)."
            )
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        previous = None
        if close_previous:
            previous = (
                GpuPrice.objects.select_for_update()
                .filter(
                    gpu_model=gpu_model,
                    mig_profile=mig_profile,
                    effective_to__isnull=True,
                    effective_from__lt=effective_from,
                )
                .first()
            )
            if previous is not None:
                previous.effective_to = effective_from
                previous.save(update_fields=["effective_to"])
        clash = price_overlaps(
            gpu_model=gpu_model,
            mig_profile=mig_profile,
            effective_from=effective_from,
            effective_to=effective_to,
        ).first()
        if clash is not None:
            raise ValidationError(
                {
                    "effective_from": f"Overlaps the price {clash.price_per_hour} "
                    f"{clash.currency}/h in force from {clash.effective_from:%Y-%m-%d %H:%M}."
                }
            )
        try:
            with transaction.atomic():
                price = GpuPrice.objects.create(
                    gpu_model=gpu_model,
                    mig_profile=mig_profile,
                    price_per_hour=price_per_hour,
                    currency=currency.upper(),
                    effective_from=effective_from,
                    effective_to=effective_to,
                    note=note,
                    created_by=actor if getattr(actor, "pk", None) else None,
                )
        except IntegrityError as exc:
            # Another editor's overlapping price committed first (the exclusion constraint).
            raise ValidationError(
                {"effective_from": "Another price for this period was just saved; reload."}
            ) from exc
        audit(
            actor=actor,
            verb="price.create",
            obj=price,
            before={"previous_id": previous.pk} if previous else None,
            after={
                "gpu_model": gpu_model.name,
                "mig_profile": mig_profile,
                "price_per_hour": str(price.price_per_hour),
                "currency": price.currency,
                "effective_from": effective_from.isoformat(),
                "effective_to": effective_to.isoformat() if effective_to else None,
            },
        )
    return price
