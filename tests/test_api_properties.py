"""Property-based requests from the OpenAPI schema (schemathesis), as a researcher and as a
department manager: no input the schema allows, nor any it does not, makes a server error, and
every answer is one the schema documents, shaped as it says."""

from __future__ import annotations

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from drf_spectacular.generators import SchemaGenerator
from hypothesis import HealthCheck, given, settings
from schemathesis import checks

from queues.services.tenancy import api_token_create
from tests.queues.builders import job_world_setup

EXAMPLES = 30  # per operation and role: bounded, so `make test` stays quick
CHECKS = [
    checks.not_a_server_error,
    checks.status_code_conformance,
    checks.response_schema_conformance,
    checks.content_type_conformance,
]


def _schema():
    raw = SchemaGenerator().get_schema(request=None, public=True)
    schema = schemathesis.openapi.from_dict(raw)
    schema.app = get_wsgi_application()
    return schema


SCHEMA = _schema()
OPERATIONS = [result.ok() for result in SCHEMA.get_all_operations()]


@pytest.fixture
def keep_test_connection():
    """The app runs in this thread on the test's database connection (and transaction), which
    Django closes after each request unless told not to, as its own test client does."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.mark.slow
@pytest.mark.usefixtures("keep_test_connection")
@pytest.mark.parametrize("role", ["alice", "maria"])
@pytest.mark.parametrize("operation", OPERATIONS, ids=lambda op: op.label)
def test_the_api_keeps_its_schema(world, role, operation):
    job_world_setup(world)
    _token, raw = api_token_create(user=world[role], name="schemathesis")
    headers = {"Authorization": f"Bearer {raw}"}

    @given(case=operation.as_strategy())
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def check(case):
        response = case.call(headers=headers)
        case.validate_response(response, checks=CHECKS, headers=headers)

    check()
