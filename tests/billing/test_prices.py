"""Price-book lookups (fleet.prices) and the no-overlap constraint."""

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from fleet.models import GpuModel
from fleet.selectors.prices import (
    HOURS_PER_MONTH,
    monthly_price,
    price_book_version,
    price_in_force,
    price_overlaps,
)
from tests.billing.conftest import make_price

T0 = datetime(2026, 1, 1, tzinfo=UTC)
T1 = datetime(2026, 1, 15, tzinfo=UTC)


@pytest.fixture
def a100(db):
    return GpuModel.objects.create(name="A100-SXM4-80GB", dcgm_model_names=["NVIDIA A100"])


def test_price_in_force_half_open(a100):
    old = make_price(a100, "2.0000", T0, T1)
    new = make_price(a100, "2.5000", T1)
    assert price_in_force(gpu_model=a100, at=T0) == old
    assert price_in_force(gpu_model=a100, at=T1) == new  # the end is exclusive
    assert price_in_force(gpu_model=a100, at=datetime(2025, 12, 31, tzinfo=UTC)) is None
    assert price_in_force(gpu_model=a100, at=T1, mig_profile="1g.10gb") is None


def test_monthly_price_is_730_hours(a100):
    make_price(a100, "2.1234", T0)
    amount, currency = monthly_price(gpu_model=a100, gpus=3, at=T1)
    assert HOURS_PER_MONTH == 730
    assert amount == Decimal("4650.25")  # 2.1234 × 730 × 3 = 4650.246
    assert currency == "EUR"
    assert monthly_price(gpu_model=a100, gpus=1, at=datetime(2020, 1, 1, tzinfo=UTC)) is None


def test_price_overlaps(a100):
    make_price(a100, "2", T0, T1)
    assert not price_overlaps(
        gpu_model=a100, mig_profile="", effective_from=T1, effective_to=None
    ).exists()
    assert price_overlaps(
        gpu_model=a100, mig_profile="", effective_from=T0, effective_to=T1
    ).exists()
    assert not price_overlaps(
        gpu_model=a100, mig_profile="3g.40gb", effective_from=T0, effective_to=None
    ).exists()


def test_price_book_version_changes_with_content(a100):
    before = price_book_version()
    row = make_price(a100, "2", T0)
    v1 = price_book_version()
    assert v1 != before and v1 == price_book_version()
    row.price_per_hour = Decimal("3")
    row.save()
    assert price_book_version() != v1


def test_overlapping_prices_refused_by_database(a100):
    make_price(a100, "2", T0, T1)
    make_price(a100, "2", T1)  # adjacent half-open periods do not overlap
    make_price(a100, "1", T0, profile="1g.10gb")
    with pytest.raises(IntegrityError), transaction.atomic():
        make_price(a100, "3", datetime(2026, 1, 10, tzinfo=UTC), datetime(2026, 1, 20, tzinfo=UTC))


def test_a_price_in_another_currency_is_refused_with_the_books_currency(a100, world, api_as):
    from billing.services.prices import gpu_price_create

    make_price(a100, "2.00", datetime(2026, 1, 1, tzinfo=UTC))
    l4 = GpuModel.objects.create(name="L4")
    with pytest.raises(ValidationError) as refused:
        gpu_price_create(
            actor=world["frank"], gpu_model=l4, price_per_hour=Decimal("1.00"),
            effective_from=datetime(2026, 1, 1, tzinfo=UTC), currency="USD",
        )  # fmt: skip
    assert "The price book is in EUR" in refused.value.message_dict["currency"][0]
    answer = api_as(world["frank"]).post(
        "/api/v1/billing/prices/",
        {"gpu_model": l4.name, "price_per_hour": "1.00", "currency": "usd",
         "effective_from": "2026-01-01T00:00:00Z"},
        format="json",
    )  # fmt: skip
    assert answer.status_code == 400 and "currency" in answer.json()
    assert not l4.prices.exists()
