"""Every operation of the API schema × every role, generated from the schema itself, so that a
new endpoint is covered without anyone remembering to add it here.

- Anonymous callers are refused (401/403) everywhere but the token endpoint.
- An object of another department's team (recsys, Product) answers 404 to the people of
  Research (alice, bob, carol, maria) whatever the method: nobody learns it exists.
- The Product manager (pablo), who sees it, gets an answer other than 404 and never a 500.
- Nobody, in any role, gets a server error.
"""

from __future__ import annotations

from datetime import date

import pytest
from drf_spectacular.generators import SchemaGenerator

from planning.models import WhatIfRun
from tests.factories import (
    ApiTokenFactory,
    AuditEventFactory,
    ClusterFactory,
    GpuModelFactory,
    JobFactory,
    JobTemplateFactory,
    MembershipFactory,
    NodeFactory,
    NodePoolFactory,
    PriorityTierFactory,
    QuotaFactory,
    QuotaRequestFactory,
    ReservationFactory,
    SweepFactory,
    TeamSecretFactory,
    TeamVolumeFactory,
    UserFactory,
)

ROLES = ["anonymous", "alice", "bob", "carol", "maria", "pablo", "frank", "admin"]
RESEARCH = ["alice", "bob", "carol", "maria"]
# Resources whose objects belong to a team: another department's answer 404.
TEAM_SCOPED = {"departments", "teams", "memberships", "quota-requests", "quotas",
               "audit-events", "jobs", "job-templates", "sweeps", "billing/jobs",
               "whatif", "reservations"}  # fmt: skip
# A team's own objects (its volumes and secrets): outside the team, platform admins aside,
# everybody gets 404, the department's manager included.
TEAM_ONLY = {"volumes", "secrets"}
# A user's own objects: everybody else gets 404.
PERSONAL = {"tokens"}
PUBLIC = {("POST", "/api/v1/auth/token/")}


def _operations():
    schema = SchemaGenerator().get_schema(request=None, public=True)
    return sorted(
        (method.upper(), path)
        for path, ops in schema["paths"].items()
        for method in ops
        if method in ("get", "post", "put", "patch", "delete")
    )


OPERATIONS = _operations()


def _resource(path: str) -> str:
    parts = path.removeprefix("/api/v1/").strip("/").split("/")
    return "billing/" + parts[1] if parts[0] == "billing" else parts[0]


@pytest.fixture
def foreign(world):
    """One object of every kind that belongs to recsys (Product) or to nobody's team."""
    rita = UserFactory(username="rita")
    MembershipFactory(user=rita, team=world["recsys"], role="lead")
    pool = NodePoolFactory(cluster=ClusterFactory(name="authz"), gpu_model=GpuModelFactory())
    tier = PriorityTierFactory(name="authz-tier", value=5)
    objects = {
        "departments": world["product"].slug,
        "teams": world["recsys"].slug,
        "memberships": world["recsys"].memberships.get().pk,
        "tokens": ApiTokenFactory(user=rita).pk,
        "quota-requests": QuotaRequestFactory(
            team=world["recsys"], pool=pool, requested_by=rita
        ).pk,
        "quotas": QuotaFactory(team=world["recsys"], pool=pool).pk,
        "reservations": ReservationFactory(team=world["recsys"], pool=pool, requested_by=rita).pk,
        "audit-events": AuditEventFactory(team=world["recsys"], actor=rita).pk,
        "jobs": JobFactory(team=world["recsys"], owner=rita, tier=tier).pk,
        "job-templates": JobTemplateFactory(team=world["recsys"], created_by=rita).pk,
        "sweeps": SweepFactory(team=world["recsys"], owner=rita).pk,
        "volumes": TeamVolumeFactory(team=world["recsys"], cluster=pool.cluster).pk,
        "secrets": TeamSecretFactory(team=world["recsys"], cluster=pool.cluster).pk,
        "tiers": tier.pk,
        "clusters": pool.cluster_id,
        "pools": pool.pk,
        "nodes": NodeFactory(pool=pool).pk,
        "gpu-models": pool.gpu_model_id,
        "billing/reports": date(2026, 10, 1).strftime("%Y-%m"),
        "billing/jobs": JobFactory(team=world["recsys"], owner=rita, tier=tier).pk,
        # A what-if run of Product's manager: his and the platform admins' only.
        "whatif": WhatIfRun.objects.create(name="authz", created_by=world["pablo"]).pk,
    }
    return objects


def _url(path: str, foreign: dict) -> str:
    resource = _resource(path)
    url = path
    for name in ("id", "slug", "month"):
        if "{" + name + "}" in url:
            assert resource in foreign, (
                f"{path}: no object to try it with; add one for {resource!r} to the fixture"
            )
            url = url.replace("{" + name + "}", str(foreign[resource]))
    # GPU health names a node by its cluster's id and its name (billing/gpu-health).
    url = url.replace("{cluster_id}", str(foreign["clusters"])).replace("{node}", "authz-node")
    return url.replace("{action}", "close")


def _call(client, method: str, url: str):
    if method in ("POST", "PUT", "PATCH"):
        return getattr(client, method.lower())(url, {}, format="json")
    return getattr(client, method.lower())(url)


@pytest.mark.parametrize("method, path", OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS])
def test_every_role_gets_a_proper_answer(world, foreign, api, method, path):
    url = _url(path, foreign)
    for role in ROLES:
        api.logout()
        if role != "anonymous":
            api.force_authenticate(user=None)
            api.force_login(world[role])
        response = _call(api, method, url)
        code = response.status_code
        assert code < 500, f"{role}: {method} {url} answered {code}"
        if role == "anonymous" and (method, path) not in PUBLIC:
            assert code in (401, 403), f"anonymous: {method} {url} answered {code}"
        if "{" in path and _resource(path) in TEAM_SCOPED:
            if role in RESEARCH:
                assert code == 404, f"{role}: {method} {url} of Product answered {code}"
            if role == "pablo":
                assert code != 404, f"pablo sees Product's objects: {method} {url} gave 404"
        if "{" in path and _resource(path) in TEAM_ONLY and role not in ("anonymous", "admin"):
            assert code == 404, f"{role}: {method} {url} of recsys answered {code}"
        if "{" in path and _resource(path) in PERSONAL and role != "anonymous":
            assert code == 404, f"{role}: {method} {url} of rita answered {code}"
