import pytest
from django.urls import reverse

from queues.models import ApiToken
from tests.factories import PASSWORD, MembershipFactory, TeamFactory

pytestmark = pytest.mark.django_db


def test_pages_need_login(client, world):
    for name in ("home", "team-list", "profile"):
        response = client.get(reverse(name))
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("login"))


def test_login_page_renders_and_bad_password_shows_error(client, world):
    response = client.post(reverse("login"), {"username": "alice", "password": "wrong"})
    assert response.status_code == 200
    assert b"Please enter a correct username and password" in response.content
    assert (
        client.post(reverse("login"), {"username": "alice", "password": PASSWORD}).status_code
        == 302
    )


def test_home_shows_teams_and_roles(client, world):
    client.force_login(world["bob"])
    body = client.get(reverse("home")).content.decode()
    assert "Vision" in body and "Team lead of Vision" in body
    assert "Language" not in body


def test_navigation_fits_roles(client, world):
    client.force_login(world["alice"])
    assert 'href="/admin/"' not in client.get(reverse("home")).content.decode()
    client.force_login(world["admin"])
    assert 'href="/admin/"' in client.get(reverse("home")).content.decode()


def test_team_pages_scoped(client, world):
    client.force_login(world["alice"])
    listing = client.get(reverse("team-list")).content.decode()
    assert "Vision" in listing and "Language" not in listing
    assert client.get(reverse("team-detail", args=["vision"])).status_code == 200
    assert client.get(reverse("team-detail", args=["nlp"])).status_code == 404


def test_team_list_query_count(client, world, django_assert_max_num_queries):
    for _ in range(10):
        MembershipFactory(team=TeamFactory(department=world["research"]))
    client.force_login(world["frank"])
    with django_assert_max_num_queries(10):
        assert client.get(reverse("team-list")).status_code == 200


def test_profile_creates_shows_once_and_revokes_token(client, world):
    client.force_login(world["alice"])
    empty = client.post(reverse("profile"), {"name": ""})
    assert empty.status_code == 200
    assert "This field is required" in empty.content.decode()
    assert not ApiToken.objects.exists()

    created = client.post(reverse("profile"), {"name": "laptop"})
    raw = created.context["new_token"]
    assert raw.startswith("qm_") and raw in created.content.decode()
    token = ApiToken.objects.get(name="laptop")
    assert raw not in client.get(reverse("profile")).content.decode()

    client.post(reverse("token-revoke", args=[token.pk]))
    token.refresh_from_db()
    assert token.revoked_at is not None


def test_cannot_revoke_someone_elses_token_from_page(client, world):
    token = ApiToken.objects.create(user=world["carol"], name="x", prefix="qm_x", digest="d" * 64)
    client.force_login(world["alice"])
    assert client.post(reverse("token-revoke", args=[token.pk])).status_code == 404
    token.refresh_from_db()
    assert token.revoked_at is None


def test_admin_site_only_for_platform_admins(client, world):
    world["alice"].is_staff = True
    world["alice"].save()
    client.force_login(world["alice"])
    assert client.get("/admin/").status_code == 302
    client.force_login(world["admin"])
    assert client.get("/admin/").status_code == 200


def _job(world, owner, team, state, name="train"):
    from queues.models import Job, PriorityTier

    tier, _ = PriorityTier.objects.get_or_create(
        name="experiment", defaults={"value": 100, "is_default": True}
    )
    return Job.objects.create(
        team=team,
        owner=owner,
        name=name,
        image="python:3.11",
        command=["python", "train.py"],
        tier=tier,
        max_runtime_seconds=3600,
        state=state,
    )


def test_home_shows_each_role_what_needs_it(client, world, django_assert_max_num_queries):
    from fleet.models import Cluster, GpuModel, NodePool
    from queues.models import QuotaRequest

    _job(world, world["alice"], world["vision"], "running", name="resnet")
    _job(world, world["alice"], world["vision"], "pending_approval", name="big-sweep")
    _job(world, world["carol"], world["nlp"], "queued", name="carols-job")
    cluster = Cluster.objects.create(name="c1", kubeconfig_path="/x", last_sync_error="boom")
    pool = NodePool.objects.create(
        cluster=cluster, name="a100", gpu_model=GpuModel.objects.create(name="A100")
    )
    QuotaRequest.objects.create(
        team=world["vision"],
        pool=pool,
        requested_by=world["bob"],
        nominal_gpus=8,
        justification="more",
    )

    client.force_login(world["alice"])
    with django_assert_max_num_queries(15):
        body = client.get(reverse("home")).content.decode()
    assert "resnet" in body and "big-sweep" in body and "carols-job" not in body
    assert "Jobs waiting for your approval" not in body

    client.force_login(world["bob"])
    body = client.get(reverse("home")).content.decode()
    assert "Jobs waiting for your approval" in body and "big-sweep" in body

    client.force_login(world["maria"])
    body = client.get(reverse("home")).content.decode()
    assert "Quota requests to decide" in body and "8 GPUs in a100" in body

    client.force_login(world["pablo"])
    assert "8 GPUs in a100" not in client.get(reverse("home")).content.decode()

    client.force_login(world["admin"])
    body = client.get(reverse("home")).content.decode()
    assert "sync error" in body and "boom" in body

    client.force_login(world["frank"])
    body = client.get(reverse("home")).content.decode()
    assert "last month's report" in body and 'href="/billing/reports/' in body
