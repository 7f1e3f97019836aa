"""Hostile input answers a clear 4xx in JSON on every API endpoint, never a server error."""

import json

import pytest
from django.urls import reverse

WRITES = [
    "/api/v1/auth/token/",
    "/api/v1/teams/",
    "/api/v1/memberships/",
    "/api/v1/quota-requests/",
    "/api/v1/jobs/",
    "/api/v1/pools/",
    "/api/v1/billing/budgets/",
    "/api/v1/billing/prices/",
]


@pytest.mark.parametrize("url", WRITES)
@pytest.mark.parametrize("body", ["[" * 1500 + "]" * 1500, '{"a":' * 1200 + "1" + "}" * 1200])
def test_a_body_nested_too_deep_is_a_400(world, api_as, url, body):
    response = api_as(world["admin"]).generic("POST", url, body, content_type="application/json")
    assert response.status_code == 400, response.content[:200]
    assert response.json() == {"detail": "The JSON body is nested too deeply to read."}


@pytest.mark.parametrize("url", WRITES)
def test_an_oversized_body_is_a_413_in_json(world, api_as, url, settings):
    body = json.dumps({"name": "x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 10)})
    response = api_as(world["admin"]).generic("POST", url, body, content_type="application/json")
    assert response.status_code == 413
    assert response["Content-Type"] == "application/json"
    assert "larger than the" in response.json()["detail"]


@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/teams/nope/?format=xlsx",
        "/api/v1/jobs/999999/?format=csv",
        "/api/v1/billing/reports/2026-13/?format=xlsx",
        "/api/v1/billing/reports/2026-13/?format=csv",
        "/api/v1/billing/reports/2026-13/?format=focus",
    ],
)
def test_errors_render_as_json_whatever_format_was_asked(world, api_as, url):
    response = api_as(world["frank"]).get(url)
    assert 400 <= response.status_code < 500
    assert response["Content-Type"] == "application/json"
    assert response.json()


@pytest.mark.parametrize(
    "url", ["/api/v1/teams/", "/api/v1/jobs/", "/api/v1/audit-events/", "/api/v1/nodes/"]
)
@pytest.mark.parametrize(
    "query", ["limit=9223372036854775808", "limit=10&offset=99999999999999999999999"]
)
def test_limits_and_offsets_beyond_any_table_are_an_empty_or_capped_page(world, api_as, url, query):
    response = api_as(world["admin"]).get(f"{url}?{query}")
    assert response.status_code == 200
    assert len(response.json()["results"]) <= 1000


def test_an_unknown_page_is_not_djangos_technical_page(world, client):
    client.force_login(world["alice"])
    response = client.get("/no/such/page/")
    assert response.status_code == 404
    assert b"URLconf" not in response.content and b"Quartermaster" in response.content


def test_the_api_root_lists_without_error(world, api_as):
    assert api_as(world["alice"]).get(reverse("api-root")).status_code == 200


def test_a_membership_without_a_role_is_a_member(world, api_as):
    response = api_as(world["bob"]).post(
        "/api/v1/memberships/", {"user": "carol", "team": "vision"}, format="json"
    )
    assert response.status_code == 201, response.content
    assert response.json()["role"] == "member"


def test_the_membership_endpoint_does_not_tell_who_exists(world, api_as, api):
    """A member who may not change the team gets the same 403 for a real and a made-up user;
    a lead learns that a username does not exist (they need to)."""
    alice = api_as(world["alice"])
    real = alice.post("/api/v1/memberships/", {"user": "carol", "team": "vision"}, format="json")
    made_up = alice.post("/api/v1/memberships/", {"user": "zed", "team": "vision"}, format="json")
    assert real.status_code == made_up.status_code == 403
    assert real.json() == made_up.json()
    api.logout()
    lead = api_as(world["bob"]).post(
        "/api/v1/memberships/", {"user": "zed", "team": "vision"}, format="json"
    )
    assert lead.status_code == 400 and "No active user is called 'zed'" in lead.json()["user"][0]


@pytest.mark.parametrize("month", ["9999-12", "0001-01", "1-01", "2026-1"])
def test_a_report_for_a_month_out_of_range_is_a_400(world, api_as, month):
    response = api_as(world["frank"]).get(f"/api/v1/billing/reports/{month}/")
    assert response.status_code in (400, 404)
    if response.status_code == 400:
        assert "Use YYYY-MM with a year from 1970 to 9998" in response.json()["month"][0]


def test_report_pages_for_months_out_of_range_are_a_404(world, client):
    client.force_login(world["frank"])
    assert client.get("/billing/reports/9999-12/").status_code == 404


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("env", {"TOKEN": "a\x00b"}, "NUL"),
        ("env", {"NAME\n": "x"}, "Invalid variable name"),
        ("name", "train\x00", "Null characters are not allowed"),
        ("command", ["python", "x\x00"], "NUL"),
    ],
)
def test_nul_and_trailing_newlines_are_refused_on_submission(world, api_as, field, value, message):
    from tests.queues.builders import job_world_setup

    jw = job_world_setup(world)
    body = {"team": "vision", "name": "train", "image": "ghcr.io/acme/train:1.0",
            "command": ["python", "train.py"], "pool": "a100", "max_runtime_seconds": 600,
            field: value}  # fmt: skip
    response = api_as(jw["alice"]).post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 400, response.content
    assert message in json.dumps(response.json())


def test_job_environment_values_are_for_the_team_and_admins(world, api_as, api):
    from tests.queues.builders import job_world_setup, submit

    jw = job_world_setup(world)
    job = submit(jw, env={"WANDB_KEY": "s3cret"})
    url = f"/api/v1/jobs/{job.pk}/"
    assert api_as(jw["alice"]).get(url).json()["env"] == {"WANDB_KEY": "s3cret"}
    api.logout()
    assert api_as(jw["admin"]).get(url).json()["env"] == {"WANDB_KEY": "s3cret"}
    for outsider in ("frank", "maria"):
        api.logout()
        client = api_as(jw[outsider])
        assert client.get(url).json()["env"] == {"WANDB_KEY": None}
        listed = client.get("/api/v1/jobs/").json()["results"]
        assert [j["env"] for j in listed] == [{"WANDB_KEY": None}]


@pytest.mark.parametrize(
    "url, body",
    [
        ("/api/v1/memberships/", {"user": "carol", "team": "vi\x00sion"}),
        ("/api/v1/quota-requests/", {"team": "\x00", "pool": 1, "nominal_gpus": 1}),
    ],
)
def test_nul_in_a_lookup_is_a_400(world, api_as, url, body):
    response = api_as(world["bob"]).post(url, body, format="json")
    assert response.status_code == 400
    assert "NUL" in json.dumps(response.json())


def test_a_format_an_endpoint_does_not_offer_is_checked_like_json(world, api_as):
    """Asking for CSV where only JSON is served does not skip authorization (it answered 404
    before the permission check): the caller gets the same 403/404 as for JSON, or JSON."""
    alice, frank = api_as(world["alice"]), None
    for fmt in ("", "?format=csv", "?format=xlsx"):
        refused = alice.post(f"/api/v1/billing/reports/2026-10/close/{fmt}", {})
        assert refused.status_code == 403, fmt
        assert "finance" in refused.json()["detail"]
        unseen = alice.get(f"/api/v1/billing/reports/2026-10/?team=nlp{fmt.replace('?', '&')}")
        assert unseen.status_code == 404 and "that you can see" in unseen.json()["detail"]
    frank = api_as(world["frank"])
    listed = frank.get("/api/v1/billing/prices/?format=csv")
    assert listed.status_code == 200 and listed["Content-Type"].startswith("application/json")
