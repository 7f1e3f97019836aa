"""Property-based requests from the OpenAPI schema (schemathesis + hypothesis), each sent as a
member, a team lead, a department manager, finance and a platform admin, against a world that
holds a job, a volume, a secret, a template, a quota request, a sweep and a what-if run (so that
an id in a path often names a real object and the request gets past the 404).

- Well-formed cases (schemathesis' positive mode): never a server error, and every answer is
  one the schema documents, shaped as it says.
- Hostile cases: schemathesis' negative mode (wrong types, missing required fields, values out
  of range) and well-formed cases made hostile (a path parameter that is not an id, a query
  parameter or any string or key of the JSON body replaced by a lone UTF-16 surrogate, NUL,
  non-ASCII digits, a path that climbs, a system namespace, a file:// URL, 5000 characters...;
  a required field dropped, an unknown field added, a body that is not JSON). These go through
  Django's test client as raw bytes, not through schemathesis (which re-validates a case before
  sending it and cannot encode a surrogate). The answer is never a server error; a 4xx answer
  is JSON in the API's error shape ({"detail": "..."} or field -> messages); and a refused
  write leaves every table as it was.
- Methods a path does not list: 405 (or 404, or 403), never a server error, in the same error shape.

Reproducible: hypothesis runs from a fixed seed (QM_SCHEMA_SEED). Each operation gets
POSITIVE_EXAMPLES and HOSTILE_EXAMPLES examples, each sent as every role, which keeps `make test`
quick; `make props` (QM_SCHEMA_EXAMPLES=150) explores deeper by hand.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from urllib.parse import quote

import pytest
import schemathesis
from django.apps import apps
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections, connection, transaction
from django.test import Client
from django.urls import Resolver404, resolve
from drf_spectacular.generators import SchemaGenerator
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from schemathesis import checks
from schemathesis.core import NOT_SET
from schemathesis.generation.modes import GenerationMode

from queues.services.tenancy import api_token_create
from tests.factories import (
    JobTemplateFactory,
    QuotaRequestFactory,
    SweepFactory,
    TeamSecretFactory,
    TeamVolumeFactory,
    WhatIfRunFactory,
)
from tests.queues.builders import job_world_setup, submit

# QM_SCHEMA_EXAMPLES scales both kinds (the default run uses the figures below).
SCALE = int(os.environ.get("QM_SCHEMA_EXAMPLES", "0"))
POSITIVE_EXAMPLES = SCALE or 6
HOSTILE_EXAMPLES = SCALE or 10
SEED = int(os.environ.get("QM_SCHEMA_SEED", "32"))
# A member, a team lead, a department manager, finance and a platform admin (and, for hostile
# requests, no one signed in).
ROLES = ["alice", "bob", "maria", "frank", "admin"]
CHECKS = [
    checks.not_a_server_error,
    checks.status_code_conformance,
    checks.response_schema_conformance,
    checks.content_type_conformance,
]
WRITES = {"POST", "PUT", "PATCH", "DELETE"}
APPS = {"core", "fleet", "queues", "billing", "planning", "sso"}

# Text for anywhere a string goes: lone surrogates (no UTF-8 form), digits that are not ASCII,
# NUL, paths that climb or name the service account's token, names that belong to the cluster,
# URLs that are not http, numbers that are not numbers, and very long or invisible text.
HOSTILE_TEXT = [
    "\ud800", "x\udfff", "\udc00\ud800", "²", "٣", "¹⁰", "1.5", "-1", "99999999999999999999",
    "1e999", "NaN", "", " ", "\x00", "a\x00b", "../..", "/data/../..", "/data/./../etc",
    "/var/run/secrets/kubernetes.io", "/var/run/secrets/kubernetes.io/serviceaccount/../x",
    "kube-system", "default", "kueue-system", "file:///etc/passwd", "ftp://example.org/",
    "javascript:alert(1)", "😀", "\u202e", "%00", "<script>", "a" * 5000, "true", "null",
]  # fmt: skip
# Path parameters: ids and slugs that are neither.
HOSTILE_PATH = ["1.5", "abc", "²", "٣", "-1", "0", "99999999999999999999", "1e3", "kube-system",
                " ", "x" * 300, "\ud800", "%00", "..", "1\x00"]  # fmt: skip
HOSTILE_VALUE = st.one_of(
    st.sampled_from(HOSTILE_TEXT),
    st.sampled_from([None, True, -1, 0, 2**63, -(2**63) - 1, 1e308, [], {}, [None], {"\ud800": 1}]),
)
# Bodies that are not a JSON object: broken bytes, broken JSON, JSON of the wrong kind.
HOSTILE_RAW = [b"\xff\xfe\x00", b"{", b'{"a": 1,}', b'"text"', b"[]", b"null", b"1", b"[" * 5000,
               b'{"\\ud800": "\\udfff"}']  # fmt: skip


# A valid body for each write a random body seldom gets right (a real team, pool, user): half
# the hostile bodies start from one of these, so that the one hostile value meets the code
# past validation (the save, the render, the cluster call) instead of bouncing off a field the
# schema's random text got wrong.
JOB = {"name": "train", "image": "ghcr.io/acme/train:1", "command": ["python", "train.py"],
       "args": ["--lr", "0.1"], "env": {"LR": "0.1"}, "workers": 1, "gpus_per_worker": 1,
       "pool": "a100", "max_runtime_seconds": 600,
       "volumes": [{"volume": "data", "mount_path": "/data"}]}  # fmt: skip
SEED_BODIES = {
    "POST /api/v1/jobs/": JOB,
    "POST /api/v1/job-templates/": {"team": "vision", "name": "nightly", "spec": JOB},
    "POST /api/v1/sweeps/": {**JOB, "grid": {"env": {"LR": ["0.1", "0.01"]}}},
    "POST /api/v1/secrets/": {"team": "vision", "name": "hf", "values": {"api-key": "k"}},
    "POST /api/v1/volumes/": {"team": "vision", "name": "scratch", "size_gib": 1},
    "PATCH /api/v1/volumes/{id}/": {"size_gib": 20},
    "POST /api/v1/memberships/": {"team": "vision", "user": "carol", "role": "member"},
    "POST /api/v1/quota-requests/": {"team": "vision", "pool": "{a100}", "nominal_gpus": 9,
                                     "justification": "More experiments."},
    "POST /api/v1/teams/{slug}/member-fair-sharing/": {"weights": {"alice": 2}},
    "POST /api/v1/teams/{slug}/hold/": {"reason": "maintenance"},
    "POST /api/v1/teams/": {"slug": "speech", "name": "Speech", "department": "research"},
    "PATCH /api/v1/teams/{slug}/": {"cost_centre": "cc-7"},
    "POST /api/v1/departments/": {"slug": "ops", "name": "Ops"},
    "PATCH /api/v1/approval-policy/": {"allowed_registries": ["ghcr.io"]},
    "POST /api/v1/pools/": {"cluster": "offline", "name": "h100", "gpu_model": "L4",
                            "node_selector": {"accelerator": "h100"}},
    "POST /api/v1/clusters/": {"name": "east", "kubeconfig_path": "{kubeconfig}",
                               "prometheus_url": "http://prometheus.example:9090/"},
    "POST /api/v1/billing/budgets/": {"team": "vision", "month": "2026-11", "amount": "10"},
    "POST /api/v1/tokens/": {"name": "ci"},
    "POST /api/v1/tiers/": {"name": "urgent", "value": 500, "idle_threshold_percent": 5,
                            "idle_after_minutes": 30},
    "POST /api/v1/billing/prices/": {"gpu_model": "L4", "price_per_hour": "1.20",
                                     "currency": "EUR", "effective_from": "2026-12-01T00:00:00Z"},
    "POST /api/v1/billing/ledger/rate/": {"rate_per_gpu_hour": "2.00", "note": "list price"},
    "PUT /api/v1/billing/energy/": {"pue": "1.3", "grams_per_kwh": "300"},
    "POST /api/v1/departments/{slug}/fair-share/": {"shares_with_organisation": True,
                                                    "weight": "2"},
    "POST /api/v1/teams/{slug}/fair-share/": {"weight": "2"},
    "PATCH /api/v1/quota-auto-approval/": {"enabled": True, "min_usage_percent": 70,
                                           "max_increase_gpus": 4, "max_increase_percent": 50,
                                           "lookback_days": 7},
    "POST /api/v1/whatif/": {"name": "double vision", "days": 1, "quotas": [
        {"team": "vision", "pool": "{a100}", "nominal_gpus": 12, "borrowing_limit": 4,
         "lending_limit": 2}]},
    "POST /api/v1/quota-requests/{id}/approve/": {"nominal_gpus": 8, "reason": "fine"},
    "PATCH /api/v1/clusters/{id}/": {"kubeconfig_path": "{kubeconfig}",
                                     "prometheus_url": "http://prom.example:9090/",
                                     "dcgm_scrape_urls": ["http://dcgm.example:9400/metrics"]},
    "PATCH /api/v1/pools/{id}/": {"node_selector": {"accelerator": "a100"}, "cpu_per_gpu": "8",
                                  "memory_per_gpu": "64Gi", "tolerations": [
                                      {"key": "gpu", "operator": "Exists",
                                       "effect": "NoSchedule"}]},
    "POST /api/v1/teams/{slug}/pod-security/": {"exempt": True, "reason": "legacy images"},
    "POST /api/v1/clusters/{id}/disable/": {"reason": "maintenance"},
    "PATCH /api/v1/departments/{slug}/": {"name": "Research", "managers": ["maria"]},
}  # fmt: skip
# Who sends each seed body in the field-by-field test (someone it is meant for).
SEED_SENDER = {
    "POST /api/v1/secrets/": "bob", "POST /api/v1/volumes/": "bob",
    "PATCH /api/v1/volumes/{id}/": "bob", "POST /api/v1/memberships/": "bob",
    "POST /api/v1/quota-requests/": "bob", "POST /api/v1/teams/{slug}/hold/": "maria",
    "POST /api/v1/teams/{slug}/member-fair-sharing/": "maria", "POST /api/v1/teams/": "admin",
    "PATCH /api/v1/teams/{slug}/": "admin", "POST /api/v1/departments/": "admin",
    "PATCH /api/v1/approval-policy/": "admin", "POST /api/v1/pools/": "admin",
    "POST /api/v1/clusters/": "admin", "POST /api/v1/billing/budgets/": "frank",
    "POST /api/v1/tiers/": "admin", "POST /api/v1/billing/prices/": "admin",
    "POST /api/v1/billing/ledger/rate/": "admin", "PUT /api/v1/billing/energy/": "admin",
    "POST /api/v1/departments/{slug}/fair-share/": "admin",
    "POST /api/v1/teams/{slug}/fair-share/": "maria", "PATCH /api/v1/quota-auto-approval/": "admin",
    "POST /api/v1/whatif/": "maria", "POST /api/v1/quota-requests/{id}/approve/": "maria",
    "PATCH /api/v1/clusters/{id}/": "admin", "PATCH /api/v1/pools/{id}/": "admin",
    "POST /api/v1/teams/{slug}/pod-security/": "admin",
    "POST /api/v1/clusters/{id}/disable/": "admin", "PATCH /api/v1/departments/{slug}/": "admin",
}  # fmt: skip
# Each of these goes into each value (and as a key) of each seed body, one at a time.
HOSTILE_GRID = ["\ud800", "x\x00y", "²", "a" * 5000, "../..", "kube-system", "NaN", "1e999",
                "2026-02-30", "v\n", -1, 2**63, 1.5, None, True, [], {}]  # fmt: skip


def _schema():
    raw = SchemaGenerator().get_schema(request=None, public=True)
    schema = schemathesis.openapi.from_dict(raw)
    schema.app = get_wsgi_application()
    return raw, schema


RAW, SCHEMA = _schema()
OPERATIONS = [result.ok() for result in SCHEMA.get_all_operations()]


def _label(operation):
    return operation.label


# --- The world the requests meet ---------------------------------------------------------------


@pytest.fixture
def full_world(world, tmp_path):
    """job_world_setup plus one object of each kind an {id} in a path can name, and a
    kubeconfig file (of a cluster no one listens for) that a new cluster may name."""
    jw = job_world_setup(world)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    vision = jw["vision"]
    objects = {
        "job": submit(jw),
        "volume": TeamVolumeFactory(team=vision, cluster=jw["cluster"], name="data"),
        "secret": TeamSecretFactory(team=vision, cluster=jw["cluster"], name="wandb"),
        "template": JobTemplateFactory(team=vision, created_by=jw["alice"]),
        "quota_request": QuotaRequestFactory(
            team=vision, pool=jw["pools"]["a100"], requested_by=jw["bob"]
        ),
        "sweep": SweepFactory(team=vision, owner=jw["alice"]),
        "whatif": WhatIfRunFactory(created_by=jw["maria"]),
    }
    return {**jw, **objects, "kubeconfig": kubeconfig}


KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: east, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: portal, user: {token: not-a-token}}]
contexts: [{name: east, context: {cluster: east, user: portal}}]
current-context: east
"""


def _real_ids(operation) -> list[str]:
    """The ids (or slugs) of existing objects of the model behind an operation's path."""
    names = [p.name for p in operation.path_parameters]
    if not names:
        return []
    try:
        path = operation.path
        for name in names:
            path = path.replace(f"{{{name}}}", "1")
        match = resolve(path)
    except Resolver404:
        return []
    cls = getattr(match.func, "cls", None)
    model = getattr(getattr(cls, "queryset", None), "model", None)
    if model is None:
        meta = getattr(getattr(cls, "serializer_class", None), "Meta", None)
        model = getattr(meta, "model", None)
    if model is None:
        return []
    field = getattr(cls, "lookup_field", "pk")
    return [str(v) for v in model.objects.values_list(field, flat=True)[:20]]


def _seed_body(world, label):
    """The seed body of an operation with the world's pool ids in place, or None."""
    seed_body = SEED_BODIES.get(label)
    if seed_body is None:
        return None
    text = json.dumps(seed_body).replace('"{a100}"', str(world["pools"]["a100"].pk))
    text = text.replace("{kubeconfig}", str(world["kubeconfig"]))
    return json.loads(text)


def _seed_url(world, path) -> str:
    """A seed body's path with its {slug} or {id} naming the world's object of that kind."""
    objects = {"volumes": world["volume"], "quota-requests": world["quota_request"],
               "jobs": world["job"], "clusters": world["cluster"],
               "pools": world["pools"]["a100"]}  # fmt: skip
    kind = path.split("/")[3]
    slug = "research" if kind == "departments" else "vision"
    return path.replace("{slug}", slug).replace("{id}", str(getattr(objects.get(kind), "pk", 0)))


def _tokens(world):
    return {role: api_token_create(user=world[role], name="properties")[1] for role in ROLES}


def _table_digests() -> dict[str, str]:
    """A digest of every row of every table of the project's apps, in one query (the test
    world is small), so that a refused write that changed or added anything shows."""
    tables = sorted(
        m._meta.db_table
        for m in apps.get_models()
        if m._meta.app_label in APPS and m._meta.managed and not m._meta.proxy
    )
    sql = " UNION ALL ".join(
        f"SELECT '{t}', md5(coalesce(string_agg(r::text, ',' ORDER BY r::text), '')) FROM \"{t}\" r"
        for t in tables
    )
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return dict(cursor.fetchall())


# What a refused request may still write: the token's last use, and the audit trail.
WRITTEN_ON_REFUSAL = {"queues_apitoken", "queues_auditevent"}


# --- Well-formed cases: the schema holds --------------------------------------------------------


@pytest.fixture
def keep_test_connection():
    """schemathesis calls the WSGI app in this thread, on the test's database connection (and
    transaction), which Django closes after each request unless told not to."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@st.composite
def positive_cases(draw, operation, real_ids):
    """A well-formed case whose path parameters name a real object about half the time."""
    case = draw(operation.as_strategy())
    if real_ids and case.path_parameters and draw(st.booleans()):
        for name in case.path_parameters:
            case.path_parameters[name] = draw(st.sampled_from(real_ids))
    return case


@pytest.mark.slow
@pytest.mark.usefixtures("keep_test_connection")
@pytest.mark.parametrize("operation", OPERATIONS, ids=_label)
def test_the_api_keeps_its_schema(full_world, operation):
    tokens = _tokens(full_world)
    real_ids = _real_ids(operation)

    @seed(SEED)
    @settings(
        max_examples=POSITIVE_EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=positive_cases(operation, real_ids))
    def check(case):
        for role in ROLES:
            headers = {"Authorization": f"Bearer {tokens[role]}"}
            response = case.call(headers=headers)
            case.validate_response(response, checks=CHECKS, headers=headers)

    check()


# --- Hostile cases: refused with field errors, nothing half-written -----------------------------


@dataclass
class Hostile:
    """A request as bytes on the wire, and what was done to it (for the failure message)."""

    method: str
    path: str
    query: str
    body: bytes | None
    how: str
    content_type: str = "application/json"

    def __repr__(self):
        body = self.body[:300] if self.body else self.body
        return f"{self.how}: {self.method} {self.path}?{self.query} body={body!r}"


def _wire(value) -> str:
    """A value as a percent-encoded URL part; a lone surrogate becomes the (invalid UTF-8) bytes
    a broken client would send."""
    text = value if isinstance(value, str) else json.dumps(value)
    return quote(text.encode("utf-8", "surrogatepass"), safe="")


def _path(operation, params) -> str:
    path = operation.path
    for name, value in params.items():
        path = path.replace(f"{{{name}}}", _wire(value))
    return path


def _query(query) -> str:
    pairs = []
    for name, value in (query or {}).items():
        for item in value if isinstance(value, list) else [value]:
            pairs.append(f"{_wire(name)}={_wire(item)}")
    return "&".join(pairs)


def _paths(value, prefix=()):
    """Where the values (and the keys) of a JSON value are, as paths into it."""
    if isinstance(value, dict):
        yield (*prefix, ("key",))
        for key, item in value.items():
            yield from _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, (*prefix, index))
    if prefix:
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
def hostile_requests(draw, operation, real_ids, seed_body):
    """A negative-mode case, or a well-formed case made hostile in one place."""
    params_known = bool(operation.path_parameters) or bool(operation.query)
    negative = operation.body or params_known
    how = draw(
        st.sampled_from(["negative", "path", "query", "body", "drop", "unknown", "raw", "form"])
    )
    if how == "negative" and negative:
        case = draw(operation.as_strategy(GenerationMode.NEGATIVE))
    else:
        case = draw(operation.as_strategy())
        how = "query" if how == "negative" else how
    params = dict(case.path_parameters or {})
    if real_ids and params and how != "path":
        params = {name: draw(st.sampled_from(real_ids)) for name in params}
    query = dict(case.query or {})
    body = case.body if case.body is not NOT_SET else None
    if seed_body is not None and how != "negative" and draw(st.booleans()):
        body = seed_body
    raw = None
    if how == "path" and params:
        params[draw(st.sampled_from(sorted(params)))] = draw(st.sampled_from(HOSTILE_PATH))
    elif how == "query":
        names = [p.name for p in operation.query] or ["format", "limit", "offset", "ordering"]
        query[draw(st.sampled_from(names))] = draw(st.sampled_from(HOSTILE_TEXT))
    elif how == "body" and isinstance(body, (dict, list)) and body:
        body = _replace(body, draw(st.sampled_from(list(_paths(body)))), draw(HOSTILE_VALUE))
    elif how == "body":
        body = draw(st.dictionaries(st.sampled_from(["name", "team", "reason", "spec", "path"]),
                                    HOSTILE_VALUE, min_size=1, max_size=3))  # fmt: skip
    elif how == "drop" and isinstance(body, dict) and body:
        body = {k: v for k, v in body.items() if k != draw(st.sampled_from(sorted(body)))}
    elif how == "unknown":
        extra = {draw(st.sampled_from(["id", "owner", "state", "is_superuser", "\ud800"])): "x"}
        body = {**body, **extra} if isinstance(body, dict) else extra
    elif how == "raw":
        raw = draw(st.sampled_from(HOSTILE_RAW))
    elif how == "form":
        # The form parsers take what the JSON parser refuses: a field of the body, or any
        # name, as hostile text in a form (a surrogate as the invalid UTF-8 it would be).
        fields = dict(body) if isinstance(body, dict) else {}
        name = draw(st.sampled_from(sorted(fields) or ["name", "team", "path", "value"]))
        fields[name] = draw(st.sampled_from(HOSTILE_TEXT))
        form = _query({k: v if isinstance(v, str) else json.dumps(v) for k, v in fields.items()})
        return Hostile(
            case.method.upper(),
            _path(operation, params),
            _query(query),
            form.encode(),
            how,
            "application/x-www-form-urlencoded",
        )
    method = case.method.upper()
    if isinstance(body, bytes):  # negative mode's body for a form media type
        raw = raw or body
    elif raw is None and body is not None and method != "GET":
        raw = json.dumps(body).encode()  # a surrogate goes as its \\u escape: valid JSON
    return Hostile(method, _path(operation, params), _query(query), raw, how)


def _messages(value) -> bool:
    """An error message, or messages nested as DRF nests them (lists, dicts by field/index)."""
    if isinstance(value, str):
        return bool(value.strip())
    if isinstance(value, list):
        return bool(value) and all(_messages(v) for v in value)
    if isinstance(value, dict):
        return bool(value) and all(isinstance(k, str) and _messages(v) for k, v in value.items())
    return False


def _cluster_unavailable(response) -> bool:
    """The 503 of a write the world's cluster (offline: no kubeconfig) did not take, after
    which nothing was saved: the answer for a valid secret, not a server error."""
    return response.status_code == 503 and "nothing was saved" in response.json().get("detail", "")


def assert_refusal_shape(response, request):
    """A 4xx the API answers is JSON: {"detail": "..."} (with an optional code), or field ->
    messages (400), so that a client can tell the person what to fix."""
    assert response["Content-Type"].startswith("application/json"), (request, response.content)
    body = response.json()
    assert isinstance(body, dict) and body, (request, body)
    if "detail" in body:
        assert isinstance(body["detail"], str) and body["detail"].strip(), (request, body)
    else:
        assert response.status_code in (400, 409, 422), (request, response.status_code, body)
        assert _messages(body), (request, body)


@pytest.mark.slow
@pytest.mark.parametrize("operation", OPERATIONS, ids=_label)
def test_hostile_input_is_refused_with_field_errors_and_nothing_half_written(full_world, operation):
    tokens = _tokens(full_world)
    real_ids = _real_ids(operation)
    client = Client(raise_request_exception=False)

    @seed(SEED)
    @settings(
        max_examples=HOSTILE_EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(request=hostile_requests(operation, real_ids, _seed_body(full_world, operation.label)))
    def check(request):
        for role in [*ROLES, None]:
            auth = {"HTTP_AUTHORIZATION": f"Bearer {tokens[role]}"} if role else {}
            before = _table_digests() if request.method in WRITES else None
            response = client.generic(
                request.method,
                request.path,
                request.body or b"",
                content_type=request.content_type,
                QUERY_STRING=request.query,
                **auth,
            )
            status = response.status_code
            ok = status < 500 or _cluster_unavailable(response)
            assert ok, (role, request, status, response.content[:2000])
            if status >= 400:
                assert_refusal_shape(response, (role, request))
                if before is not None:
                    after = _table_digests()
                    changed = {
                        t for t in before if before[t] != after[t] and t not in WRITTEN_ON_REFUSAL
                    }
                    assert not changed, (role, request, status, changed)

    check()


# --- Methods the schema does not list ------------------------------------------------------------

METHODS = {"get", "post", "put", "patch", "delete"}


@pytest.mark.parametrize("path", sorted(RAW["paths"]))
def test_methods_the_schema_does_not_list_are_refused_not_failed(full_world, path):
    """Every method a path does not document answers 405 (or 404 where the object is missing,
    403 to who may not act there), never a server error, whatever the body, and in the API's
    error shape."""
    tokens = _tokens(full_world)
    url = path.replace("{id}", str(full_world["job"].pk)).replace("{slug}", "vision")
    url = url.replace("{month}", "2026-11").replace("{pk}", "1").replace("{action}", "close")
    client = Client(raise_request_exception=False)
    for role in ROLES:
        for method in sorted(METHODS - set(RAW["paths"][path])):
            body = b"" if method == "get" else json.dumps({"name": "\ud800", "team": "x"}).encode()
            answer = client.generic(
                method.upper(),
                url,
                body,
                content_type="application/json",
                HTTP_AUTHORIZATION=f"Bearer {tokens[role]}",
            )
            # DRF checks who asks before it looks for the method: who may not act there at
            # all hears 403 first.
            allowed = (404, 405) if role == "admin" else (403, 404, 405)
            assert answer.status_code in allowed, (role, method, url, answer.status_code)
            assert_refusal_shape(answer, (role, method, url))


@pytest.mark.parametrize("label", sorted(SEED_BODIES))
def test_the_seed_bodies_are_accepted_by_someone(full_world, label):
    """Each seed body is a write some role may make (so that the hostile bodies made from it
    reach past validation); a seed that rots into a 400 fails here, not silently there."""
    method, path = label.split(" ")
    url = _seed_url(full_world, path)
    tokens = _tokens(full_world)
    client = Client(raise_request_exception=False)
    answers = {}
    for role in ROLES:
        answer = client.generic(
            method,
            url,
            json.dumps(_seed_body(full_world, label)).encode(),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {tokens[role]}",
        )
        answers[role] = (answer.status_code, answer.content[:300])
        if answer.status_code < 300 or _cluster_unavailable(answer):
            return  # a 503: past validation, to the (offline) cluster
    pytest.fail(f"no role may {label} with its seed body: {answers}")


@pytest.mark.parametrize("label", sorted(SEED_BODIES))
def test_every_field_of_a_valid_body_refuses_hostile_values_cleanly(full_world, label):
    """Each value (and a new key) of a valid body replaced in turn by each hostile value, and
    each field left out, sent by whom the body is meant for: never a server error, a 4xx in the
    API's error shape, and a refusal (or a 503 of the offline cluster) that wrote nothing. Each
    request is rolled back, so each meets the same world."""
    method, path = label.split(" ")
    url = _seed_url(full_world, path)
    seed_body = _seed_body(full_world, label)
    token = _tokens(full_world)[SEED_SENDER.get(label, "alice")]
    client = Client(raise_request_exception=False)
    failures = []
    variants = [
        (f"{where}={value!r}"[:80], _replace(seed_body, where, value))
        for where in _paths(seed_body)
        for value in HOSTILE_GRID
    ]
    variants += [(f"without {name}", {k: v for k, v in seed_body.items() if k != name})
                 for name in seed_body]  # fmt: skip
    for how, body in variants:
        request = Hostile(method, url, "", json.dumps(body).encode(), how)
        with transaction.atomic():
            before = _table_digests()
            response = client.generic(
                method,
                url,
                request.body,
                content_type="application/json",
                HTTP_AUTHORIZATION=f"Bearer {token}",
            )
            status = response.status_code
            if status >= 500 and not _cluster_unavailable(response):
                failures.append((request.how, status))
            elif status >= 400:
                assert_refusal_shape(response, request)
                after = _table_digests()
                changed = {t for t in before if before[t] != after[t]} - WRITTEN_ON_REFUSAL
                assert not changed, (request, status, changed)
            transaction.set_rollback(True)
    assert not failures, failures


@pytest.mark.usefixtures("keep_test_connection")
@pytest.mark.parametrize(
    "label, role, body",
    [
        ("PATCH /api/v1/approval-policy/", "admin", {"allowed_registries": ["ghcr.io", ""]}),
        ("POST /api/v1/teams/{slug}/member-fair-sharing/", "maria",
         {"weights": {"alice": "heavy", "bob": 1000}}),
    ],
)  # fmt: skip
def test_a_400_for_items_of_a_list_or_map_field_is_the_shape_the_schema_documents(
    full_world, label, role, body
):
    """Found by the deeper run (#32): the schema documented a 400 as field -> messages only,
    while a list or map field's errors are nested by index or key."""
    method, path = label.split(" ")
    operation = SCHEMA[path][method]
    case = operation.Case(path_parameters={"slug": "vision"} if "{slug}" in path else {},
                          body=body, media_type="application/json")  # fmt: skip
    headers = {"Authorization": f"Bearer {_tokens(full_world)[role]}"}
    response = case.call(headers=headers)
    assert response.status_code == 400, response.text
    assert any(isinstance(v, dict) for v in response.json().values()), response.json()
    case.validate_response(response, checks=CHECKS, headers=headers)
