"""A lone UTF-16 surrogate ("\\ud800" in JSON) cannot be encoded as UTF-8, so no database, page
or JSON answer can hold one. It is refused where text comes in: in any string of any JSON body,
at any depth, keys included, with a 400 that names the field; forms that read JSON say so on the
field. What renders answers is robust to one all the same, and rows an older portal stored with
one (SQLite keeps them in JSON text) are repaired by a migration."""

from __future__ import annotations

import json

import pytest
from django.template import engines
from django.urls import reverse
from rest_framework.settings import api_settings

from fleet.forms.inventory import PoolForm
from queues.models import Job
from tests.queues.builders import job_world_setup

LONE = "\ud800"
JOB = {"name": "train", "image": "ghcr.io/acme/train:1", "command": ["python", "train.py"],
       "workers": 1, "gpus_per_worker": 1, "pool": "a100", "max_runtime_seconds": 600}  # fmt: skip

# (who, method, url, body, the field the answer names)
CASES = [
    ("alice", "post", "/api/v1/jobs/", {**JOB, "command": ["python", f"x{LONE}"]}, "command"),
    ("alice", "post", "/api/v1/jobs/", {**JOB, "args": ["--lr", LONE]}, "args"),
    ("alice", "post", "/api/v1/jobs/", {**JOB, "env": {"A": f"1{LONE}"}}, "env"),
    ("alice", "post", "/api/v1/jobs/", {**JOB, "env": {f"A{LONE}": "1"}}, "env"),
    ("alice", "post", "/api/v1/jobs/", {**JOB, "name": f"train{LONE}"}, "name"),
    ("alice", "post", "/api/v1/jobs/",
     {**JOB, "volumes": [{"volume": "data", "mount_path": f"/d{LONE}"}]}, "volumes"),
    ("alice", "post", "/api/v1/job-templates/",
     {"team": "vision", "name": "t", "spec": {**JOB, "env": {"A": LONE}}}, "spec"),
    ("alice", "post", "/api/v1/job-templates/", {"team": "vision", "name": LONE}, "name"),
    ("alice", "post", "/api/v1/sweeps/", {**JOB, "grid": {"env": {"LR": ["0.1", LONE]}}}, "grid"),
    ("bob", "post", "/api/v1/secrets/",
     {"team": "vision", "name": "wandb", "values": {"api-key": f"k{LONE}"}}, "values"),
    ("bob", "post", "/api/v1/volumes/", {"team": "vision", "name": LONE, "size_gib": 1}, "name"),
    ("bob", "post", "/api/v1/memberships/", {"team": "vision", "user": LONE}, "user"),
    ("bob", "post", "/api/v1/quota-requests/",
     {"team": "vision", "pool": "a100", "requested_gpus": 9, "justification": LONE},
     "justification"),
    ("maria", "post", "/api/v1/teams/vision/member-fair-sharing/",
     {"weights": {f"alice{LONE}": 2}}, "weights"),
    ("maria", "post", "/api/v1/teams/vision/hold/", {"reason": LONE}, "reason"),
    ("admin", "post", "/api/v1/teams/",
     {"slug": "speech", "name": f"Speech{LONE}", "department": "research"}, "name"),
    ("admin", "patch", "/api/v1/teams/vision/", {"cost_centre": LONE}, "cost_centre"),
    ("admin", "post", "/api/v1/departments/", {"slug": "ops", "name": LONE}, "name"),
    ("admin", "patch", "/api/v1/approval-policy/", {"allowed_registries": [LONE]},
     "allowed_registries"),
    ("admin", "post", "/api/v1/pools/",
     {"cluster": "offline", "name": "h100", "gpu_model": "L4", "node_selector": {"a": LONE}},
     "node_selector"),
    ("admin", "post", "/api/v1/clusters/",
     {"name": "east", "kubeconfig_path": "/dev/null", "prometheus_url": f"http://p/{LONE}"},
     "prometheus_url"),
    ("frank", "post", "/api/v1/billing/budgets/",
     {"team": "vision", "month": f"2026-1{LONE}", "amount": "10"}, "month"),
    ("maria", "post", "/api/v1/whatif/", {"name": "plan", "days": 7,
                                          "weights": [{"team": "vision", "weight": LONE}]},
     "weights"),
    (None, "post", "/api/v1/auth/token/", {"username": LONE, "password": "x"}, "username"),
]  # fmt: skip


@pytest.mark.parametrize(
    "who,method,url,body,field", CASES, ids=[f"{c[2]}:{c[4]}:{n}" for n, c in enumerate(CASES)]
)
def test_a_lone_surrogate_anywhere_in_a_json_body_is_a_400_naming_the_field(
    world, api, who, method, url, body, field
):
    job_world_setup(world)
    if who:
        api.force_login(world[who])
    # json.dumps writes the surrogate as the escape "\ud800", as any client would send it.
    answer = getattr(api, method)(url, json.dumps(body), content_type="application/json")
    assert answer.status_code == 400, (answer.status_code, answer.content[:300])
    errors = answer.json()
    assert field in errors, errors
    assert "surrogate" in str(errors[field])


def test_a_body_that_is_a_lone_surrogate_or_a_list_of_them_is_a_400(world, api_as):
    job_world_setup(world)
    client = api_as(world["alice"])
    for body in (json.dumps(LONE), json.dumps([LONE])):
        answer = client.post("/api/v1/jobs/", body, content_type="application/json")
        assert answer.status_code == 400
        assert "surrogate" in str(answer.json())


def test_surrogate_pairs_and_any_unicode_are_kept(world, api_as):
    job_world_setup(world)
    body = {**JOB, "name": "träin 😀", "env": {"EMOJI": "😀", "CJK": "学习"}}
    answer = api_as(world["alice"]).post(
        "/api/v1/jobs/", json.dumps(body), content_type="application/json"
    )
    assert answer.status_code == 201, answer.content
    job = Job.objects.get()
    assert (job.name, job.env) == ("träin 😀", {"EMOJI": "😀", "CJK": "学习"})


def test_encoded_surrogates_in_forms_and_queries_read_as_replacement_characters(world, client):
    """Form posts and query strings are UTF-8 bytes, which cannot hold a lone surrogate: the
    bytes one would take (ED A0 80) are read as U+FFFD, so pages neither fail nor store one."""
    job_world_setup(world)
    client.force_login(world["alice"])
    assert client.get("/api/v1/jobs/?name=%ED%A0%80").status_code == 200
    assert client.get("/jobs/?q=%ED%A0%80").status_code == 200
    answer = client.post(
        reverse("profile"), "name=script%ED%A0%80", content_type="application/x-www-form-urlencoded"
    )
    assert answer.status_code == 200
    assert world["alice"].api_tokens.get().name == "script\ufffd\ufffd\ufffd"


def test_a_form_that_reads_json_names_the_field_with_a_surrogate(world):
    data = job_world_setup(world)
    form = PoolForm(
        data={"cluster": data["cluster"].pk, "name": "h100",
              "gpu_model": data["pools"]["l4"].gpu_model_id,
              "node_selector": "accelerator=h100", "tolerations": json.dumps([{"key": LONE}]),
              "capacity_type": "on-demand", "interconnect": "pcie", "sharing": "none"},
    )  # fmt: skip
    assert not form.is_valid()
    assert list(form.errors) == ["tolerations"]
    assert "surrogate" in str(form.errors["tolerations"])


def test_the_json_renderer_writes_a_stored_surrogate_as_a_replacement_character():
    renderer = api_settings.DEFAULT_RENDERER_CLASSES[0]()
    body = renderer.render({"command": ["python", f"x{LONE}"], "ok": "😀"})
    assert json.loads(body) == {"command": ["python", "x\ufffd"], "ok": "😀"}


def test_the_json_renderer_writes_a_float_json_cannot_hold_as_null():
    renderer = api_settings.DEFAULT_RENDERER_CLASSES[0]()
    body = renderer.render({"usage": [float("inf"), 1.5], "share": {"x": float("nan")},
                            "name": f"x{LONE}"})  # fmt: skip
    assert json.loads(body) == {"usage": [None, 1.5], "share": {"x": None}, "name": "x\ufffd"}


def test_pages_render_a_surrogate_as_a_replacement_character():
    page = engines["django"].from_string("<p>{{ name }}</p>").render({"name": f"job{LONE}"})
    assert page == "<p>job\ufffd</p>"
    page.encode()  # what the response does with it


def test_the_admin_refuses_a_surrogate_in_a_json_field(world, client):
    data = job_world_setup(world)
    model = data["pools"]["l4"].gpu_model
    world["admin"].is_superuser = True  # the model permissions the admin's pages ask for
    world["admin"].save()
    client.force_login(world["admin"])
    answer = client.post(
        reverse("admin:fleet_gpumodel_change", args=[model.pk]),
        {"name": "L4", "vendor": "NVIDIA", "memory_mib": "", "dcgm_model_names": "[]",
         "product_labels": json.dumps([f"NVIDIA-L4{LONE}"])},
    )  # fmt: skip
    assert answer.status_code == 200  # the form again, with the error
    assert "lone UTF-16 surrogate" in answer.content.decode()
    model.refresh_from_db()
    assert model.product_labels == []
