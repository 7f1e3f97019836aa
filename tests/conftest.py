"""Fixtures shared by every test: a small tenancy world, API clients, a real Celery worker."""

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from kubesim.testing import wait_stepping
from tests.factories import (
    DepartmentFactory,
    MembershipFactory,
    TeamFactory,
    UserFactory,
    finance_user,
    manager_of,
    platform_admin,
)

# Cluster fixtures (kubesim + a registered Cluster; the real control plane) and the test
# workers' own brokers live in their own modules.
pytest_plugins = [
    "tests.fixtures_cluster",
    "tests.fixtures_real",
    "tests.rbac_record",
    "tests.workers",
]

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DIR = Path(os.environ.get("QM_SHARED_DIR", REPO_ROOT.parent / "shared"))


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    # PBKDF2's deliberate slowness costs seconds per test user; tests do not need it.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _fresh_cache(settings):
    """Each test starts with an empty in-memory cache: a figure cached by one test (keyed by a
    row id another test may reuse) never answers in the next."""
    yield
    if settings.CACHES["default"]["BACKEND"].endswith("LocMemCache"):
        from django.core.cache import cache

        cache.clear()


@pytest.fixture
def world(db):
    """Two departments; research has vision and nlp, product has recsys; one user per role."""
    research = DepartmentFactory(slug="research", name="Research")
    product = DepartmentFactory(slug="product", name="Product")
    vision = TeamFactory(slug="vision", name="Vision", department=research)
    nlp = TeamFactory(slug="nlp", name="Language", department=research)
    recsys = TeamFactory(slug="recsys", name="Recommendations", department=product)
    alice = UserFactory(username="alice")
    bob = UserFactory(username="bob")
    carol = UserFactory(username="carol")
    MembershipFactory(user=alice, team=vision, role="member")
    MembershipFactory(user=bob, team=vision, role="lead")
    MembershipFactory(user=carol, team=nlp, role="member")
    return {
        "research": research,
        "product": product,
        "vision": vision,
        "nlp": nlp,
        "recsys": recsys,
        "alice": alice,
        "bob": bob,
        "carol": carol,
        "maria": manager_of(research, "maria"),
        "pablo": manager_of(product, "pablo"),
        "frank": finance_user("frank"),
        "admin": platform_admin("admin"),
    }


@pytest.fixture
def api():
    return APIClient()


@pytest.fixture
def api_as(api):
    """api_as(user) -> an APIClient logged in (session) as that user."""

    def login(user):
        api.force_login(user)
        return api

    return login


def wait_until(predicate, timeout=30.0, interval=0.2):
    """Whether the predicate came true within `timeout` seconds; kubesim's clock steps to its
    next event meanwhile, no further than the timeout (kubesim.testing.wait_stepping)."""
    return bool(wait_stepping(predicate, timeout=timeout, interval=interval))


@contextlib.contextmanager
def _celery_worker(settings, *options: str, output=subprocess.PIPE):
    """A real `celery worker` process over the test Redis broker, using the test database; its
    log goes to `output` (a pipe the test reads, or an open file for a long-running test, whose
    log would fill a pipe nobody reads and block the worker)."""
    import redis
    from django.db import connection

    broker = settings.CELERY_BROKER_URL
    if not broker.startswith("redis://"):
        pytest.fail("The Celery worker tests need CELERY_BROKER_URL=redis://… (make test sets it)")
    redis.Redis.from_url(broker).flushdb()
    env = dict(os.environ)
    db = connection.settings_dict
    env["DATABASE_URL"] = (
        f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "config", "worker", *options, "--loglevel", "info",
         "--without-heartbeat", "--without-mingle", "--without-gossip"],
        cwd=REPO_ROOT,
        env=env,
        stdout=output,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture
def celery_worker_process(transactional_db, settings):
    """A real `celery worker` process (one process, the solo pool)."""
    with _celery_worker(settings, "--pool", "solo") as proc:
        yield proc


@pytest.fixture
def celery_prefork_worker(transactional_db, settings):
    """A real `celery worker` as deployed: a main process and one forked pool process, which it
    replaces when it dies."""
    with _celery_worker(settings, "--pool", "prefork", "--concurrency", "1") as proc:
        yield proc


@pytest.fixture(scope="session")
def helm_binary():
    """Helm built from its Go module (cluster/build/helm), once; cached outside the checkout."""
    import shutil

    from cluster import helm

    if shutil.which("go") is None:
        pytest.fail("Helm is built from its Go module (cluster/build/helm): install Go",
                    pytrace=False)  # fmt: skip
    return helm.binary(log=lambda *_: None)
