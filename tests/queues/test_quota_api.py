"""The quota governance API: field errors, who may see and decide, query counts."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from queues.models import PriorityTier, Quota, QuotaRequest
from queues.services import quotas as quota_services
from tests.factories import MembershipFactory, UserFactory


def _payload(quota_world, **kw):
    data = {
        "team": "vision",
        "pool": quota_world["a100"].pk,
        "nominal_gpus": 10,
        "justification": "Bigger batch sizes.",
    }
    data.update(kw)
    return data


def _request(quota_world, nominal=10):
    return quota_services.quota_request_create(
        actor=quota_world["bob"],
        team=quota_world["vision"],
        pool=quota_world["a100"],
        nominal_gpus=nominal,
        justification="More.",
    )


def test_lead_files_a_request(quota_world, api_as):
    response = api_as(quota_world["bob"]).post(
        reverse("quotarequest-list"), _payload(quota_world, borrowing_limit=2), format="json"
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["state"] == "pending" and body["team"] == "vision" and body["pool_name"] == "a100"


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"nominal_gpus": 0}, "nominal_gpus"),
        ({"nominal_gpus": -4}, "nominal_gpus"),
        ({"nominal_gpus": "ten"}, "nominal_gpus"),
        ({"lending_limit": 20}, "lending_limit"),
        ({"ends_at": "2001-01-01T00:00:00Z"}, "ends_at"),
        ({"ends_at": "next tuesday"}, "ends_at"),
        ({"pool": 999999}, "pool"),
        ({"pool": "a100"}, "pool"),
        ({"team": "recsys"}, "team"),  # not a team alice can see
    ],
)
def test_bad_input_is_a_400_with_field_errors(quota_world, api_as, changes, field):
    response = api_as(quota_world["alice"]).post(
        reverse("quotarequest-list"), _payload(quota_world, **changes), format="json"
    )
    assert response.status_code == 400, response.content
    assert field in response.json()
    assert not QuotaRequest.objects.exists()


def test_manager_approves_with_trim(quota_world, api_as):
    request = _request(quota_world, nominal=12)
    url = reverse("quotarequest-approve", args=[request.pk])
    response = api_as(quota_world["maria"]).post(url, {"nominal_gpus": 10}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["state"] == "approved"
    assert response.json()["granted_nominal_gpus"] == 10
    assert (
        Quota.objects.get(team=quota_world["vision"], pool=quota_world["a100"]).nominal_gpus == 10
    )
    again = api_as(quota_world["maria"]).post(url, {}, format="json")
    assert again.status_code == 400
    assert "already approved" in again.json()["non_field_errors"][0]


def test_over_capacity_approval_is_a_400_saying_by_how_much(quota_world, api_as):
    request = _request(quota_world, nominal=14)
    response = api_as(quota_world["maria"]).post(
        reverse("quotarequest-approve", args=[request.pk]), {}, format="json"
    )
    assert response.status_code == 400
    assert "by 2 GPUs" in response.json()["nominal_gpus"][0]


@pytest.mark.parametrize(("user", "code"), [("alice", 403), ("bob", 403), ("frank", 403)])
def test_people_who_see_but_may_not_decide_get_403(quota_world, api_as, user, code):
    request = _request(quota_world)
    client = api_as(quota_world[user])
    assert client.get(reverse("quotarequest-detail", args=[request.pk])).status_code == 200
    for verb, data in (("approve", {}), ("reject", {"reason": "no"})):
        response = client.post(reverse(f"quotarequest-{verb}", args=[request.pk]), data)
        assert response.status_code == code
    request.refresh_from_db()
    assert request.state == "pending"


def test_manager_of_another_department_gets_404(quota_world, api_as):
    request = _request(quota_world)
    client = api_as(quota_world["pablo"])
    assert client.get(reverse("quotarequest-detail", args=[request.pk])).status_code == 404
    response = client.post(reverse("quotarequest-approve", args=[request.pk]), {})
    assert response.status_code == 404
    assert client.get(reverse("quotarequest-list")).json()["count"] == 0


def test_reject_needs_reason(quota_world, api_as):
    request = _request(quota_world)
    url = reverse("quotarequest-reject", args=[request.pk])
    assert api_as(quota_world["maria"]).post(url, {"reason": ""}).status_code == 400
    response = api_as(quota_world["maria"]).post(url, {"reason": "Use the l4 pool."})
    assert response.status_code == 200
    assert response.json()["state"] == "rejected"


def test_quotas_are_scoped(quota_world, api_as):
    body = api_as(quota_world["carol"]).get(reverse("quota-list")).json()
    assert {q["team"] for q in body["results"]} == {"nlp"}
    assert api_as(quota_world["pablo"]).get(reverse("quota-list")).json()["count"] == 0


def test_tiers_read_for_all_written_by_admins(quota_world, api_as):
    assert api_as(quota_world["alice"]).get(reverse("tier-list")).json()["count"] == 2
    denied = api_as(quota_world["maria"]).post(reverse("tier-list"), {"name": "urgent", "value": 5})
    assert denied.status_code == 403
    created = api_as(quota_world["admin"]).post(
        reverse("tier-list"), {"name": "urgent", "value": 500}, format="json"
    )
    assert created.status_code == 201, created.content
    bad = api_as(quota_world["admin"]).post(
        reverse("tier-list"), {"name": "Not A Name", "value": "x"}
    )
    assert bad.status_code == 400 and "value" in bad.json()
    tier = PriorityTier.objects.get(name="experiment")
    response = api_as(quota_world["admin"]).patch(
        reverse("tier-detail", args=[tier.pk]), {"value": 150}, format="json"
    )
    assert response.status_code == 200
    tier.refresh_from_db()
    assert tier.value == 150


def test_audit_events_are_scoped(quota_world, api_as):
    quota_services.quota_request_approve(
        quota_request=_request(quota_world), approver=quota_world["maria"]
    )
    assert api_as(quota_world["maria"]).get(reverse("auditevent-list")).json()["count"] >= 3
    assert api_as(quota_world["pablo"]).get(reverse("auditevent-list")).json()["count"] == 0
    assert api_as(quota_world["alice"]).get(reverse("auditevent-list")).json()["count"] == 0
    assert api_as(quota_world["admin"]).get(reverse("auditevent-list")).json()["count"] >= 3


@pytest.mark.parametrize("name", ["quotarequest-list", "quota-list", "auditevent-list"])
def test_list_query_counts_do_not_grow(quota_world, api_as, name):
    client = api_as(quota_world["admin"])
    _request(quota_world)

    def count():
        with CaptureQueriesContext(connection) as ctx:
            assert client.get(reverse(name)).status_code == 200
        return len(ctx.captured_queries)

    before = count()
    for n in range(5):
        quota_services.quota_request_create(
            actor=quota_world["carol"],
            team=quota_world["nlp"],
            pool=quota_world["l4"],
            nominal_gpus=1 + n,
            justification="x",
        )
    assert count() == before


def test_a_request_is_withdrawn_through_the_api(quota_world, api_as, api):
    request = _request(quota_world)
    url = reverse("quotarequest-cancel", args=[request.pk])
    other = UserFactory(username="eve")
    MembershipFactory(user=other, team=quota_world["vision"])
    assert api_as(other).post(url).status_code == 403
    api.logout()
    response = api_as(quota_world["bob"]).post(url)
    assert response.status_code == 200 and response.json()["state"] == "cancelled"


def test_403s_name_the_rule_that_refused(quota_world, api_as):
    client = api_as(quota_world["alice"])
    tier = client.post(reverse("tier-list"), {"name": "x", "value": 1}, format="json")
    assert tier.json()["detail"] == "Only platform admins can change priority tiers."
    policy = client.patch(reverse("api-approval-policy"), {}, format="json")
    assert policy.json()["detail"] == "Only platform admins can change the approval policy."
