import pytest

from queues.models import ApiToken, Membership, Team
from tests.factories import MembershipFactory, TeamFactory

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/teams/",
        "/api/v1/departments/",
        "/api/v1/memberships/",
        "/api/v1/me/",
        "/api/v1/tokens/",
    ],
)
def test_anonymous_gets_401_on_api(api, url, world):
    response = api.get(url)
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_researcher_lists_only_own_team(api_as, world):
    response = api_as(world["alice"]).get("/api/v1/teams/")
    assert response.status_code == 200
    assert [t["slug"] for t in response.json()["results"]] == ["vision"]


def test_other_teams_object_is_404_not_403(api_as, world):
    client = api_as(world["alice"])
    assert client.get("/api/v1/teams/vision/").status_code == 200
    assert client.get("/api/v1/teams/nlp/").status_code == 404
    assert client.get("/api/v1/teams/does-not-exist/").status_code == 404
    carol_membership = Membership.objects.get(user=world["carol"])
    assert client.get(f"/api/v1/memberships/{carol_membership.pk}/").status_code == 404


def test_team_create_with_invalid_input_gives_field_errors(api_as, world):
    response = api_as(world["admin"]).post(
        "/api/v1/teams/",
        {"slug": "Not_Valid", "name": "", "department": "nope"},
        format="json",
    )
    assert response.status_code == 400
    body = response.json()
    assert "DNS-1123" in body["slug"][0]
    assert "name" in body and "department" in body
    assert not Team.objects.filter(name="").exists()


def test_admin_creates_team_and_namespace_defaults_to_slug(api_as, world):
    response = api_as(world["admin"]).post(
        "/api/v1/teams/",
        {"slug": "audio", "name": "Audio", "department": "research", "cost_centre": "CC-9"},
        format="json",
    )
    assert response.status_code == 201, response.content
    assert response.json()["namespace"] == "audio"
    assert Team.objects.get(slug="audio").department == world["research"]


def test_researcher_cannot_create_team(api_as, world):
    response = api_as(world["alice"]).post(
        "/api/v1/teams/", {"slug": "x", "name": "X", "department": "research"}, format="json"
    )
    assert response.status_code == 403


def test_duplicate_team_slug_is_400(api_as, world):
    response = api_as(world["admin"]).post(
        "/api/v1/teams/", {"slug": "vision", "name": "V2", "department": "research"}, format="json"
    )
    assert response.status_code == 400
    assert "slug" in response.json()


def test_token_obtain_and_use_and_revoke(api, world):
    response = api.post(
        "/api/v1/auth/token/", {"username": "alice", "password": "pw-for-tests-1"}, format="json"
    )
    assert response.status_code == 201
    raw = response.json()["token"]
    assert raw.startswith("qm_")
    # Only the digest is stored.
    assert not ApiToken.objects.filter(digest=raw).exists()

    api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    me = api.get("/api/v1/me/")
    assert me.status_code == 200
    assert me.json()["username"] == "alice"
    assert ApiToken.objects.get(pk=response.json()["id"]).last_used_at is not None

    revoke = api.post(f"/api/v1/tokens/{response.json()['id']}/revoke/")
    assert revoke.status_code == 200
    assert revoke.json()["revoked_at"] is not None
    after = api.get("/api/v1/me/")
    assert after.status_code == 401
    assert "revoked" in after.json()["detail"]


def test_token_obtain_wrong_password_is_400_with_message(api, world):
    response = api.post(
        "/api/v1/auth/token/", {"username": "alice", "password": "nope"}, format="json"
    )
    assert response.status_code == 400
    assert response.json() == {"non_field_errors": ["Wrong username or password."]}


def test_token_obtain_missing_fields_is_400(api, world):
    response = api.post("/api/v1/auth/token/", {}, format="json")
    assert response.status_code == 400
    assert set(response.json()) >= {"username", "password"}


def test_token_create_requires_name_and_users_cannot_revoke_others(api_as, world):
    client = api_as(world["alice"])
    assert client.post("/api/v1/tokens/", {}, format="json").status_code == 400
    created = client.post("/api/v1/tokens/", {"name": "ci"}, format="json")
    assert created.status_code == 201
    token_id = created.json()["id"]
    other = api_as(world["carol"])
    assert other.post(f"/api/v1/tokens/{token_id}/revoke/").status_code == 404
    assert ApiToken.objects.get(pk=token_id).revoked_at is None


def test_me_lists_roles(api_as, world):
    body = api_as(world["maria"]).get("/api/v1/me/").json()
    assert body["is_manager"] and body["managed_departments"] == ["research"]
    body = api_as(world["bob"]).get("/api/v1/me/").json()
    assert body["memberships"] == [{"team": "vision", "team_name": "Vision", "role": "lead"}]


def test_lead_adds_member_but_member_cannot(api_as, world):
    payload = {"user": "carol", "team": "vision", "role": "member"}
    assert api_as(world["alice"]).post("/api/v1/memberships/", payload).status_code == 403
    response = api_as(world["bob"]).post("/api/v1/memberships/", payload)
    assert response.status_code == 201, response.content
    assert Membership.objects.filter(user=world["carol"], team=world["vision"]).exists()


def test_membership_for_invisible_team_is_400(api_as, world):
    response = api_as(world["bob"]).post(
        "/api/v1/memberships/", {"user": "alice", "team": "nlp", "role": "member"}
    )
    assert response.status_code == 400
    assert "team" in response.json()


def test_last_lead_cannot_be_removed(api_as, world):
    lead = Membership.objects.get(user=world["bob"], team=world["vision"])
    response = api_as(world["bob"]).delete(f"/api/v1/memberships/{lead.pk}/")
    assert response.status_code == 400
    assert "at least one lead" in str(response.json())
    assert Membership.objects.filter(pk=lead.pk).exists()


def test_filtering_and_pagination(api_as, world):
    client = api_as(world["frank"])
    body = client.get("/api/v1/teams/?department=product").json()
    assert [t["slug"] for t in body["results"]] == ["recsys"]
    page = client.get("/api/v1/teams/?limit=1&ordering=slug").json()
    assert page["count"] == 3 and len(page["results"]) == 1 and page["next"]
    memberships = client.get("/api/v1/memberships/?team=vision&role=lead").json()
    assert [m["user"] for m in memberships["results"]] == ["bob"]


def test_team_list_query_count_does_not_grow(api_as, world, django_assert_max_num_queries):
    for _ in range(12):
        MembershipFactory(team=TeamFactory(department=world["research"]), role="lead")
    client = api_as(world["frank"])
    with django_assert_max_num_queries(8):
        assert client.get("/api/v1/teams/").status_code == 200
    with django_assert_max_num_queries(8):
        assert client.get("/api/v1/memberships/").status_code == 200


def test_openapi_schema_and_docs_are_for_signed_in_users_without_cdn(api, api_as, world, settings):
    assert api.get("/api/schema/").status_code in (401, 403)
    docs = api.get("/api/docs/")
    assert docs.status_code == 302 and "/accounts/login/" in docs["Location"]
    client = api_as(world["alice"])
    schema = client.get("/api/schema/")
    assert schema.status_code == 200
    assert b"/api/v1/teams/" in schema.content
    docs = client.get("/api/docs/")
    assert docs.status_code == 200
    assert b"cdn." not in docs.content and b"unpkg" not in docs.content
    assert b"<script>" not in docs.content  # its start-up script is a file (CSP)
    assert client.get("/api/docs/?script=").status_code == 200
    client.logout()
    settings.API_SCHEMA_PUBLIC = True
    assert api.get("/api/schema/").status_code == 200
    assert api.get("/api/docs/").status_code == 200


def test_team_removal_by_admin_and_refusals(api_as, world):
    assert api_as(world["bob"]).delete("/api/v1/teams/vision/").status_code == 403
    admin = api_as(world["admin"])
    assert admin.delete("/api/v1/teams/recsys/").status_code == 204
    assert not Team.objects.filter(slug="recsys").exists()


def test_team_with_running_jobs_cannot_be_removed(api_as, world):
    from queues.models import Job, PriorityTier

    tier = PriorityTier.objects.create(name="experiment", value=100, is_default=True)
    Job.objects.create(
        team=world["nlp"],
        owner=world["carol"],
        name="train",
        image="python:3.11",
        command=["python"],
        tier=tier,
        max_runtime_seconds=60,
        state=Job.State.RUNNING,
    )
    response = api_as(world["admin"]).delete("/api/v1/teams/nlp/")
    assert response.status_code == 400
    assert "still has 1 job(s)" in str(response.json())
    assert Team.objects.filter(slug="nlp").exists()
