"""Who may change billing: services refuse with PermissionDenied; pages and API answer 403."""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal

import pytest
from django.core.exceptions import PermissionDenied
from django.urls import reverse

from billing.services.months import report_close, report_reopen
from billing.services.prices import gpu_price_create

OCT = date(2026, 10, 1)


def test_services_refuse_who_may_not(october):
    with pytest.raises(PermissionDenied, match="edit the price book"):
        gpu_price_create(
            actor=october["maria"],
            gpu_model=october["l4"],
            price_per_hour=Decimal("1"),
            effective_from=datetime(2030, 1, 1, tzinfo=UTC),
        )
    with pytest.raises(PermissionDenied, match="close a month"):
        report_close(actor=october["maria"], month=OCT)
    report_close(actor=october["frank"], month=OCT)
    with pytest.raises(PermissionDenied, match="Only a platform admin reopens"):
        report_reopen(actor=october["frank"], month=OCT)


def test_api_answers_403_with_the_services_message(october, api_as):
    frank = api_as(october["frank"])
    assert (
        frank.post(reverse("billing-api-report-action", args=["2026-10", "close"])).status_code
        == 200
    )
    r = frank.post(reverse("billing-api-report-action", args=["2026-10", "reopen"]))
    assert r.status_code == 403
    assert r.json() == {"detail": "Only a platform admin reopens a closed month."}
    r = api_as(october["alice"]).post(
        reverse("billing-api-report-action", args=["2026-10", "close"])
    )
    assert r.status_code == 403
    assert r.json() == {"detail": "Only finance and platform admins close a month."}


@pytest.mark.parametrize("name", ["billing-price-list", "billing-budget-list"])
def test_api_writes_are_for_finance(october, api_as, name):
    r = api_as(october["maria"]).post(reverse(name), {}, format="json")
    assert r.status_code == 403
    assert r.json() == {"detail": "Only finance and platform admins can change prices and budgets."}


def test_pages_answer_403_with_the_message(october, client):
    client.force_login(october["alice"])
    cases = [
        (reverse("billing-report-action", args=["2026-10", "close"]),
         "Only finance and platform admins close a month."),
        (reverse("billing-prices"), "Only finance and platform admins edit prices."),
        (reverse("billing-budgets"), "Only finance and platform admins set budgets."),
    ]  # fmt: skip
    for url, message in cases:
        r = client.post(url, {"reason": "x"})
        assert r.status_code == 403, url
        assert message in r.content.decode()
    client.force_login(october["frank"])
    client.post(reverse("billing-report-action", args=["2026-10", "close"]))
    r = client.post(reverse("billing-report-action", args=["2026-10", "reopen"]), {"reason": "x"})
    assert r.status_code == 403
    assert "Only a platform admin reopens a closed month." in r.content.decode()
