"""Advance reservations through the REST API and the pages: who may do what, bad input as
field errors, the price by the team's policy, the dashboard's timeline."""

import datetime as dt
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from fleet.models import GpuPrice
from queues.models import AuditEvent, Reservation, ReservationSettings

URL = "/api/v1/reservations/"


def _body(w, **kw):
    start = (timezone.now() + dt.timedelta(days=3)).replace(microsecond=0)
    body = {
        "team": "vision", "pool": w["a100"].pk, "gpus": 2,
        "starts_at": start.isoformat(), "ends_at": (start + dt.timedelta(hours=5)).isoformat(),
        "reason": "Conference deadline",
    }  # fmt: skip
    body.update(kw)
    return body


@pytest.fixture
def priced(quota_world):
    GpuPrice.objects.create(gpu_model=quota_world["a100"].gpu_model,
                            price_per_hour=Decimal("2.5000"), currency="EUR",
                            effective_from=timezone.now() - dt.timedelta(days=30))  # fmt: skip
    return quota_world


def test_lead_requests_manager_approves_with_the_price(priced, api_as):
    w = priced
    answer = api_as(w["bob"]).post(URL, _body(w), format="json")
    assert answer.status_code == 201, answer.content
    data = answer.json()
    assert data["state"] == "pending"
    # 2 GPUs × 5 h × 2.50, billed in full (no policy: allocated).
    assert data["price"]["amount"] == "25.00" and data["price"]["basis"] == "allocated"
    pk = data["id"]
    assert api_as(w["bob"]).post(f"{URL}{pk}/approve/", {}, format="json").status_code == 403
    answer = api_as(w["maria"]).post(f"{URL}{pk}/approve/", {"reason": "ok"}, format="json")
    assert answer.status_code == 200 and answer.json()["state"] == "approved"
    assert AuditEvent.objects.filter(verb="reservation.approve", actor=w["maria"]).exists()


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"gpus": 0}, "gpus"),
        ({"gpus": "x"}, "gpus"),
        ({"pool": 999999}, "pool"),
        ({"team": "nope"}, "team"),
        ({"starts_at": "yesterday"}, "starts_at"),
        ({"starts_at": "2001-01-01T00:00:00Z", "ends_at": "2001-01-02T00:00:00Z"}, "starts_at"),
        ({"ends_at": "2000-01-01T00:00:00Z"}, "ends_at"),
        ({"reason": ""}, "reason"),
        ({"gpus": 50}, "gpus"),  # does not fit in the pool
    ],
)
def test_bad_input_is_a_400_with_field_errors(quota_world, api_as, change, field):
    answer = api_as(quota_world["bob"]).post(URL, _body(quota_world, **change), format="json")
    assert answer.status_code == 400, answer.content
    assert field in answer.json(), answer.json()
    assert not Reservation.objects.exists()


def test_who_may_do_what(quota_world, api_as):
    w = quota_world
    # A researcher of the team sees but does not request; another team sees nothing.
    assert api_as(w["alice"]).post(URL, _body(w), format="json").status_code == 403
    pk = api_as(w["bob"]).post(URL, _body(w), format="json").json()["id"]
    assert api_as(w["alice"]).get(f"{URL}{pk}/").status_code == 200
    assert api_as(w["carol"]).get(f"{URL}{pk}/").status_code == 404
    assert api_as(w["carol"]).get(URL).json()["results"] == []
    assert api_as(w["pablo"]).post(f"{URL}{pk}/approve/", {}, format="json").status_code == 404
    assert api_as(w["alice"]).post(f"{URL}{pk}/approve/", {}, format="json").status_code == 403
    assert api_as(w["alice"]).post(f"{URL}{pk}/cancel/", format="json").status_code == 403
    answer = api_as(w["maria"]).post(f"{URL}{pk}/reject/", {"reason": ""}, format="json")
    assert answer.status_code == 400 and "reason" in answer.json()
    # Lead time: everyone reads it, only platform admins change it.
    assert api_as(w["alice"]).get("/api/v1/reservation-settings/").json()["lead_minutes"] == 60
    settings = "/api/v1/reservation-settings/"
    assert api_as(w["maria"]).put(settings, {"lead_minutes": 5}, format="json").status_code == 403
    answer = api_as(w["admin"]).put(settings, {"lead_minutes": -5}, format="json")
    assert answer.status_code == 400 and "lead_minutes" in answer.json()
    assert api_as(w["admin"]).put(settings, {"lead_minutes": 15}, format="json").status_code == 200
    assert ReservationSettings.current().lead_minutes == 15


def test_pages_request_decide_and_show_on_the_dashboard(priced, client):
    w = priced
    client.force_login(w["alice"])
    assert client.get(reverse("quota-reservation-new")).status_code == 403
    client.force_login(w["bob"])
    start = timezone.now() + dt.timedelta(days=2)
    form = {"team": w["vision"].pk, "pool": w["a100"].pk, "gpus": "3",
            "starts_at": f"{start:%Y-%m-%dT%H:00}", "ends_at": f"{start:%Y-%m-%dT%H:00}",
            "reason": "deadline"}  # fmt: skip
    page = client.post(reverse("quota-reservation-new"), form)
    assert page.status_code == 200 and "must end after it starts" in page.content.decode()
    form["ends_at"] = f"{start + dt.timedelta(hours=4):%Y-%m-%dT%H:00}"
    page = client.post(reverse("quota-reservation-new"), form)
    assert page.status_code == 302
    r = Reservation.objects.get()
    client.force_login(w["carol"])
    assert client.get(reverse("quota-reservation-detail", args=[r.pk])).status_code == 404
    client.force_login(w["maria"])
    page = client.get(reverse("quota-reservation-detail", args=[r.pk]))
    assert "30.00 EUR" in page.content.decode()  # 3 GPUs × 4 h × 2.50
    assert client.get(reverse("quota-reservations")).context["awaiting"].count() == 1
    page = client.post(reverse("quota-reservation-detail", args=[r.pk]), {"approve": "1"})
    assert page.status_code == 302
    r.refresh_from_db()
    assert r.state == Reservation.State.APPROVED
    client.force_login(w["alice"])
    page = client.get(reverse("fleet-dashboard"))
    html = page.content.decode()
    assert f'data-reservation="{r.pk}"' in html and "30.00 EUR" in html
    client.force_login(w["carol"])
    assert (
        f'data-reservation="{r.pk}"' not in client.get(reverse("fleet-dashboard")).content.decode()
    )


def test_the_lead_time_form_is_for_platform_admins(quota_world, client):
    w = quota_world
    url = reverse("quota-reservations")
    client.force_login(w["maria"])
    assert client.get(url).context["settings_form"] is None
    assert client.post(url, {"lead_minutes": "5"}).status_code == 403
    client.force_login(w["admin"])
    page = client.post(url, {"lead_minutes": "-3"})
    assert page.status_code == 200 and page.context["settings_form"].errors["lead_minutes"]
    assert client.post(url, {"lead_minutes": "45"}).status_code == 302
    assert ReservationSettings.current().lead_minutes == 45
    assert AuditEvent.objects.filter(verb="reservation.settings", actor=w["admin"]).exists()
    # The quota page counts what waits for a manager's decision.
    client.force_login(w["bob"])
    client.post(reverse("quota-reservation-new"), {
        "team": w["vision"].pk, "pool": w["a100"].pk, "gpus": "2",
        "starts_at": f"{timezone.now() + dt.timedelta(days=3):%Y-%m-%dT%H:00}",
        "ends_at": f"{timezone.now() + dt.timedelta(days=4):%Y-%m-%dT%H:00}", "reason": "x",
    })  # fmt: skip
    client.force_login(w["maria"])
    assert "Reservations (1 waiting)" in client.get(reverse("quota-overview")).content.decode()
