"""A quota request changes only what it names: limits it leaves out keep the team's values,
on filing, on approval as filed, and through the form, the API and `qm` (issue 34: a request
for 12 GPUs used to lift the team's borrowing and lending limits unseen)."""

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from queues.models import Quota, QuotaRequest
from queues.services import quotas as quota_services
from tests.html import form_values

pytestmark = pytest.mark.django_db


def _quota(w):
    q = Quota.objects.get(team=w["vision"], pool=w["a100"])
    return q.nominal_gpus, q.borrowing_limit, q.lending_limit


def _file(w, **kw):
    values = {"team": w["vision"], "pool": w["a100"], "nominal_gpus": 12,
              "justification": "A new detector."}  # fmt: skip
    return quota_services.quota_request_create(actor=w["bob"], **{**values, **kw})


def test_a_request_naming_only_nominal_gpus_keeps_the_limits_when_approved(quota_world):
    assert _quota(quota_world) == (8, 4, 2)
    request = _file(quota_world)
    assert not request.sets_borrowing_limit and not request.sets_lending_limit
    quota_services.quota_request_approve(quota_request=request, approver=quota_world["maria"])
    assert _quota(quota_world) == (12, 4, 2)
    request.refresh_from_db()
    assert (request.granted_borrowing_limit, request.granted_lending_limit) == (4, 2)


def test_a_request_that_names_a_limit_changes_it_and_none_lifts_it(quota_world):
    request = _file(quota_world, borrowing_limit=None, lending_limit=6)
    assert request.sets_borrowing_limit and request.sets_lending_limit
    quota_services.quota_request_approve(quota_request=request, approver=quota_world["maria"])
    assert _quota(quota_world) == (12, None, 6)


def test_a_decision_changes_only_what_the_request_names(quota_world):
    request = _file(quota_world, lending_limit=3)
    with pytest.raises(ValidationError) as caught:
        quota_services.quota_request_approve(
            quota_request=request, approver=quota_world["maria"], borrowing_limit=None
        )
    assert "leaves the team's borrowing limit as it is" in caught.value.message_dict[
        "borrowing_limit"][0]  # fmt: skip
    quota_services.quota_request_approve(
        quota_request=request, approver=quota_world["maria"], nominal_gpus=10, lending_limit=1
    )
    assert _quota(quota_world) == (10, 4, 1)


def test_a_decrease_that_names_no_limit_lowers_lending_only_to_what_the_team_has(quota_world):
    request = _file(quota_world, nominal_gpus=1, justification="")  # a lead's decrease
    assert request.state == QuotaRequest.State.APPROVED
    assert _quota(quota_world) == (1, 4, 1)  # it cannot lend 2 of 1


def test_the_form_keeps_limits_left_empty_and_lifts_one_only_when_asked(quota_world, client):
    w = quota_world
    client.force_login(w["bob"])
    page = client.get(reverse("quota-request-new"), {"team": "vision"}).content.decode()
    assert "Empty: keep the team&#x27;s current limit" in page
    values = {"team": w["vision"].pk, "pool": w["a100"].pk, "nominal_gpus": "12",
              "justification": "A new detector."}  # fmt: skip
    both = client.post(reverse("quota-request-new"),
                       {**values, "borrowing_limit": "3", "no_borrowing_limit": "on"})  # fmt: skip
    assert "Give a limit or tick “no limit”, not both." in both.content.decode()
    answer = client.post(reverse("quota-request-new"), {**values, "no_lending_limit": "on"})
    request = QuotaRequest.objects.get()
    assert answer["Location"] == reverse("quota-request-detail", args=[request.pk])
    assert (request.sets_borrowing_limit, request.sets_lending_limit) == (False, True)
    assert request.lending_limit is None
    detail = client.get(answer["Location"]).content.decode()
    assert "borrowing limit unchanged; lending limit none (no limit)" in detail
    # The manager's decision form offers only what the request names, and approves as filed.
    client.force_login(w["maria"])
    html = client.get(answer["Location"]).content.decode()
    decision = form_values(html, "decide-form")
    assert "borrowing_limit" not in decision and decision["lending_limit"] == ""
    client.post(answer["Location"], {**decision, "approve": ""})
    assert _quota(w) == (12, 4, None)


def test_the_api_keeps_limits_left_out_and_null_means_no_limit(quota_world, api_as):
    w = quota_world
    api = api_as(w["bob"])
    body = {"team": "vision", "pool": w["a100"].pk, "nominal_gpus": 12, "justification": "x"}
    made = api.post("/api/v1/quota-requests/", body, format="json").json()
    assert (made["sets_borrowing_limit"], made["sets_lending_limit"]) == (False, False)
    maria = api_as(w["maria"])
    refused = maria.post(f"/api/v1/quota-requests/{made['id']}/approve/",
                         {"lending_limit": None}, format="json")  # fmt: skip
    assert refused.status_code == 400 and "lending_limit" in refused.json()
    done = maria.post(f"/api/v1/quota-requests/{made['id']}/approve/", {}, format="json")
    assert done.status_code == 200 and _quota(w) == (12, 4, 2)
    api = api_as(w["bob"])
    lifted = api.post("/api/v1/quota-requests/", {**body, "borrowing_limit": None},
                      format="json").json()  # fmt: skip
    assert lifted["sets_borrowing_limit"] and lifted["borrowing_limit"] is None
