"""Who a user is, kept between requests in a shared cache (core/principal.py): fewer queries on
every page, and never a stale answer after a change to memberships, groups or departments."""

import pytest
from django.contrib.auth.models import Group
from django.db import connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from core import principal
from core.roles import GROUP_FINANCE
from queues.models import Membership
from queues.selectors.tenancy import team_ids_visible, team_role
from queues.services.tenancy import membership_delete, membership_set
from tests.factories import JobFactory, TeamFactory

# The queries that read who the user is (not the page's own rows).
WHO_TABLES = ('"auth_user_groups"', '"queues_department_managers"')


@pytest.fixture
def shared_cache(settings, transactional_db):
    """A Redis cache, as production's CACHE_URL; requests outside any transaction, as served."""
    base = settings.CELERY_BROKER_URL.rsplit("/", 1)[0]
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": f"{base}/13",
        }
    }
    from django.core.cache import cache

    cache.clear()
    yield cache
    cache.clear()


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _who_queries(client, url) -> list[str]:
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(url).status_code == 200
    return [q["sql"] for q in ctx.captured_queries if any(t in q["sql"] for t in WHO_TABLES)]


def test_a_second_request_reads_who_the_user_is_from_the_cache(world, shared_cache):
    job = JobFactory(team=world["vision"], owner=world["alice"])
    client = _client(world["alice"])
    url = reverse("job-detail", args=[job.pk])
    assert _who_queries(client, url)  # the first request reads them
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(url).status_code == 200
    assert not [q for q in ctx.captured_queries if any(t in q["sql"] for t in WHO_TABLES)]
    assert not [q for q in ctx.captured_queries if '"queues_membership"' in q["sql"]]


def test_without_a_shared_cache_nothing_is_kept_between_requests(world, transactional_db):
    job = JobFactory(team=world["vision"], owner=world["alice"])
    client = _client(world["alice"])
    url = reverse("job-detail", args=[job.pk])
    assert not principal.shared()  # local memory: each process its own
    assert _who_queries(client, url)
    assert _who_queries(client, url)


def test_leaving_a_team_hides_its_jobs_at_the_next_request(world, shared_cache):
    job = JobFactory(team=world["vision"], owner=world["bob"])
    client = _client(world["alice"])
    url = reverse("job-detail", args=[job.pk])
    assert client.get(url).status_code == 200
    assert client.get(url).status_code == 200  # kept
    membership = Membership.objects.get(user=world["alice"], team=world["vision"])
    membership_delete(actor=world["bob"], membership=membership)
    assert client.get(url).status_code == 404
    assert client.get(reverse("job-team-list", args=["vision"])).status_code == 404


def test_joining_a_team_shows_its_jobs_at_the_next_request(world, shared_cache):
    job = JobFactory(team=world["nlp"], owner=world["carol"])
    client = _client(world["alice"])
    url = reverse("job-detail", args=[job.pk])
    assert client.get(url).status_code == 404
    membership_set(actor=world["admin"], team=world["nlp"], role="member", user=world["alice"])
    assert client.get(url).status_code == 200


def test_a_change_made_outside_the_portals_services_counts_too(world, shared_cache):
    """Django admin and the shell save models directly: the same receivers see them."""
    job = JobFactory(team=world["nlp"], owner=world["carol"])
    client = _client(world["alice"])
    url = reverse("job-detail", args=[job.pk])
    assert client.get(url).status_code == 404
    world["alice"].groups.add(Group.objects.get_or_create(name=GROUP_FINANCE)[0])
    assert client.get(url).status_code == 200  # finance sees every team
    world["alice"].groups.clear()
    assert client.get(url).status_code == 404


def test_a_manager_follows_the_department_a_team_moves_to(world, shared_cache):
    job = JobFactory(team=world["recsys"], owner=world["carol"])
    maria = _client(world["maria"])  # manages research; recsys is product's
    url = reverse("job-detail", args=[job.pk])
    assert maria.get(url).status_code == 404
    recsys = world["recsys"]
    recsys.department = world["research"]
    recsys.save()
    assert maria.get(url).status_code == 200
    world["research"].managers.remove(world["maria"])
    assert maria.get(url).status_code == 404


def test_a_new_team_in_a_managed_department_is_seen_at_once(world, shared_cache):
    maria = _client(world["maria"])
    assert maria.get(reverse("job-team-list", args=["vision"])).status_code == 200
    TeamFactory(slug="audio", name="Audio", department=world["research"])
    assert maria.get(reverse("job-team-list", args=["audio"])).status_code == 200


def test_a_transaction_neither_reads_nor_keeps_who_the_user_is(world, shared_cache):
    alice = world["alice"]
    assert team_role(user=alice, team=world["vision"]) == "member"  # kept in the cache
    with transaction.atomic():
        Membership.objects.filter(user=alice, team=world["vision"]).update(role="lead")
        fresh = type(alice).objects.get(pk=alice.pk)
        # Inside the transaction its own change is seen, not what the cache kept ...
        assert team_role(user=fresh, team=world["vision"]) == "lead"
        transaction.set_rollback(True)
    # ... and what it saw (rolled back) was never kept for others.
    again = type(alice).objects.get(pk=alice.pk)
    assert team_role(user=again, team=world["vision"]) == "member"


def test_a_copy_taken_before_a_change_in_this_process_is_not_used_after_it(world, db):
    alice = world["alice"]
    assert team_ids_visible(user=alice) == [world["vision"].pk]
    Membership.objects.create(user=alice, team=world["nlp"], role="member")
    assert sorted(team_ids_visible(user=alice)) == sorted([world["vision"].pk, world["nlp"].pk])
    assert team_role(user=alice, team=world["nlp"]) == "member"


def test_signing_in_does_not_end_what_is_kept(world, shared_cache):
    client = _client(world["alice"])
    url = reverse("job-list")
    client.get(url)
    generation = shared_cache.get(principal.GENERATION_KEY)
    _client(world["bob"])  # a sign-in saves bob's last_login
    assert shared_cache.get(principal.GENERATION_KEY) == generation
    assert not _who_queries(client, url)


def test_a_cache_that_does_not_answer_is_passed_over(world, settings, transactional_db):
    from kubesim.testing import free_port

    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": f"redis://127.0.0.1:{free_port()}/0",
        }
    }
    job = JobFactory(team=world["vision"], owner=world["alice"])
    client = _client(world["alice"])
    assert client.get(reverse("job-detail", args=[job.pk])).status_code == 200
    membership_set(actor=world["admin"], team=world["nlp"], role="member", user=world["alice"])
    other = JobFactory(team=world["nlp"], owner=world["carol"])
    assert client.get(reverse("job-detail", args=[other.pk])).status_code == 200
