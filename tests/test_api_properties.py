"""Property-based requests from the OpenAPI schema (schemathesis), as a researcher, a department
manager and a platform admin: no input the schema allows, nor any it does not, makes a server
error, and every answer to a request the schema describes is one it documents, shaped as it says.

Schemathesis' own cases are well-formed text; what people actually send is not always. So half
the examples are made hostile before they are sent: a path parameter that is not what it should
be ("1.5", "²", a huge number), a query parameter or a string anywhere in the JSON body (keys
too) replaced by hostile text (a lone UTF-16 surrogate, non-ASCII digits, NUL, "../..", a
system namespace, a file:// URL, ...), or a JSON body sent to a write that documents none. Those
answers must not be a server error. Each operation and role gets at most EXAMPLES examples and
SECONDS of requests, so `make test` stays quick (QM_SCHEMA_EXAMPLES, QM_SCHEMA_SECONDS).
"""

from __future__ import annotations

import json
import os
import time

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from drf_spectacular.generators import SchemaGenerator
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import checks
from schemathesis.core import NOT_SET

from queues.services.tenancy import api_token_create
from tests.queues.builders import job_world_setup

EXAMPLES = int(os.environ.get("QM_SCHEMA_EXAMPLES", "30"))
SECONDS = float(os.environ.get("QM_SCHEMA_SECONDS", "1.5"))
ROLES = ["alice", "maria", "admin"]
CHECKS = [
    checks.not_a_server_error,
    checks.status_code_conformance,
    checks.response_schema_conformance,
    checks.content_type_conformance,
]
WRITES = {"POST", "PUT", "PATCH"}

# Text for anywhere a string goes in a JSON body: lone surrogates (no UTF-8 form), digits that
# are not ASCII, NUL, paths that climb, names that belong to the cluster, URLs that are not
# http, numbers that are not numbers, and very long or invisible text.
HOSTILE_TEXT = [
    "\ud800", "x\udfff", "\udc00\ud800", "²", "٣", "¹⁰", "1.5", "-1", "99999999999999999999",
    "1e999", "NaN", "", " ", "\x00", "a\x00b", "../..", "/data/../..",
    "/var/run/secrets/kubernetes.io", "kube-system", "default", "file:///etc/passwd",
    "ftp://example.org/", "javascript:alert(1)", "😀", "\u202e", "%00", "<script>", "a" * 5000,
    "true", "null",
]  # fmt: skip
# Query strings are UTF-8 bytes on the wire, so no surrogates there.
HOSTILE_QUERY = [t for t in HOSTILE_TEXT if not any(0xD800 <= ord(c) <= 0xDFFF for c in t)]
# Path parameters: ids and slugs that are neither.
HOSTILE_PATH = ["1.5", "abc", "²", "٣", "-1", "0", "99999999999999999999", "1e3", "kube-system",
                " ", "x" * 300]  # fmt: skip
HOSTILE_VALUE = st.one_of(
    st.sampled_from(HOSTILE_TEXT),
    st.sampled_from([None, True, -1, 0, 2**63, 1e308, [], {}, [None], {"\ud800": 1}]),
)


def _schema():
    raw = SchemaGenerator().get_schema(request=None, public=True)
    schema = schemathesis.openapi.from_dict(raw)
    schema.app = get_wsgi_application()
    return raw, schema


RAW, SCHEMA = _schema()
OPERATIONS = [result.ok() for result in SCHEMA.get_all_operations()]


def _paths(value, prefix=()):
    """Where the strings (and the keys) of a JSON value are, as paths into it."""
    if isinstance(value, dict):
        yield (*prefix, ("key",))
        for key, item in value.items():
            yield from _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, (*prefix, index))
    if isinstance(value, str) or prefix:
        yield prefix


def _replace(value, path, new):
    """The JSON value with what is at `path` replaced by `new` (a ("key",) step: a new key)."""
    if not path:
        return new
    head, rest = path[0], path[1:]
    if head == ("key",):
        return {**value, (new if isinstance(new, str) else "\ud800"): "x"}
    copy = dict(value) if isinstance(value, dict) else list(value)
    copy[head] = _replace(copy[head], rest, new)
    return copy


@st.composite
def cases(draw, operation):
    """A schemathesis case, and whether it was made hostile (half of them are)."""
    case = draw(operation.as_strategy())
    how = draw(st.sampled_from(["none", "none", "path", "query", "body"]))
    if how == "path" and case.path_parameters:
        name = draw(st.sampled_from(sorted(case.path_parameters)))
        case.path_parameters[name] = draw(st.sampled_from(HOSTILE_PATH))
    elif how == "query":
        names = [p.name for p in operation.query] or ["format", "limit", "offset", "ordering"]
        case.query = {**(case.query or {}), draw(st.sampled_from(names)):
                      draw(st.sampled_from(HOSTILE_QUERY))}  # fmt: skip
    elif how == "body" and operation.method.upper() in WRITES:
        body = case.body
        if body is NOT_SET or not isinstance(body, (dict, list)):
            body = draw(st.dictionaries(st.sampled_from(["name", "team", "reason", "spec"]),
                                        HOSTILE_VALUE, min_size=1, max_size=3))  # fmt: skip
        else:
            path = draw(st.sampled_from(list(_paths(body))))
            body = _replace(body, path, draw(HOSTILE_VALUE))
        case.body, case.media_type = body, "application/json"
    else:
        how = "none"
    return case, how != "none"


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
@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("operation", OPERATIONS, ids=lambda op: op.label)
def test_the_api_keeps_its_schema(world, role, operation):
    job_world_setup(world)
    _token, raw = api_token_create(user=world[role], name="schemathesis")
    headers = {"Authorization": f"Bearer {raw}"}
    deadline = time.monotonic() + SECONDS

    @given(drawn=cases(operation))
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def check(drawn):
        case, hostile = drawn
        if time.monotonic() > deadline:
            return  # this operation's share of the run is spent
        response = case.call(headers=headers)
        case.validate_response(
            response, checks=[checks.not_a_server_error] if hostile else CHECKS, headers=headers
        )

    check()


METHODS = {"get", "post", "put", "patch", "delete"}


@pytest.mark.parametrize("path", sorted(RAW["paths"]))
def test_methods_the_schema_does_not_list_are_refused_not_failed(world, api, path):
    """Every method a path does not document answers 405 (or 404 where the object is
    missing), never a server error, whatever the body."""
    job_world_setup(world)
    api.force_login(world["admin"])
    url = path.replace("{id}", "1").replace("{slug}", "vision").replace("{month}", "2026-11")
    url = url.replace("{pk}", "1")
    for method in sorted(METHODS - set(RAW["paths"][path])):
        body = json.dumps({"name": "\ud800", "team": "vision"})  # the surrogate as an escape
        answer = getattr(api, method)(url, body, content_type="application/json")
        assert answer.status_code in (404, 405), (method, url, answer.status_code)
