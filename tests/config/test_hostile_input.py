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
