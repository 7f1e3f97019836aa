"""Jobs through the REST API and the pages: permissions, field errors, query counts."""

import json

import pytest
from django.urls import reverse

from fleet.models import Cluster
from queues.models import ApprovalPolicy, AuditEvent, Job
from queues.selectors.approvers import job_approvers, jobs_awaiting_decision
from queues.services.tenancy import api_token_create
from tests.queues.builders import submit

BODY = {
    "name": "resnet",
    "image": "ghcr.io/acme/train:1.0",
    "command": ["python", "train.py"],
    "workers": 1,
    "gpus_per_worker": 2,
    "pool": "a100",
    "max_runtime_seconds": 3600,
    "expected_runtime_seconds": 600,
}


def test_submission_reads_a_fixed_number_of_queries(jw, api, django_assert_num_queries):
    ApprovalPolicy.objects.create(max_gpus_without_approval=64)
    _, raw = api_token_create(user=jw["alice"], name="scripts")
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert api.post(reverse("api-job-list"), BODY, format="json").status_code == 201
    # Token and user; the team with the caller's membership; tier; the pool with the
    # department's quotas in it; the reservations in force there; node sizes; the tier; the
    # nodes' CPU and memory (the worker's default share); the approval policy with whether it
    # holds the tier; then, in a transaction (a savepoint here), the job, its name, its first
    # transition and its audit event; then what may hold the submitted job back, for its
    # pending_reason: its cluster, the messages the broker did not take and the workers'
    # heartbeats.
    with django_assert_num_queries(17):
        assert api.post(reverse("api-job-list"), BODY, format="json").status_code == 201


def test_submit_with_a_token_and_read_back(jw, api):
    _, raw = api_token_create(user=jw["alice"], name="scripts")
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    resp = api.post(reverse("api-job-list"), BODY, format="json")
    assert resp.status_code == 201, resp.content
    data = resp.json()
    assert data["state"] == "submitted"
    assert data["team"] == "vision" and data["tier"] == "experiment" and data["pool"] == "a100"
    for key in ("id", "pending_reason", "queue_position", "estimated_start", "pods"):
        assert key in data
    detail = api.get(reverse("api-job-detail", args=[data["id"]])).json()
    assert detail["id"] == data["id"] and detail["pods"] == []


@pytest.mark.parametrize(
    "change,field",
    [
        ({"image": "no good!"}, "image"),
        ({"command": []}, "command"),
        ({"command": "python"}, "command"),
        ({"workers": 0}, "workers"),
        ({"workers": "many"}, "workers"),
        ({"env": {"9X": "1"}}, "env"),
        ({"pool": "nope"}, "pool"),
        ({"team": "nlp"}, "team"),
        ({"max_runtime_seconds": None}, "max_runtime_seconds"),
    ],
)
def test_bad_input_is_400_with_field_errors(jw, api_as, change, field):
    resp = api_as(jw["alice"]).post(reverse("api-job-list"), {**BODY, **change}, format="json")
    assert resp.status_code == 400, resp.content
    assert field in resp.json()


def test_never_admissible_job_is_refused_with_a_reason(jw, api_as):
    resp = api_as(jw["alice"]).post(
        reverse("api-job-list"), {**BODY, "workers": 4, "gpus_per_worker": 8}, format="json"
    )
    assert resp.status_code == 400
    assert "at most 12 in a100" in json.dumps(resp.json())


def test_oversized_payload_is_413_not_500(jw, api_as, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    body = {**BODY, "args": ["x" * 20_000]}
    resp = api_as(jw["alice"]).post(reverse("api-job-list"), body, format="json")
    assert resp.status_code == 413, resp.content
    assert "10000 bytes" in resp.json()["detail"]


def test_other_teams_see_nothing(jw, api_as):
    job = submit(jw)
    carol = api_as(jw["carol"])
    assert carol.get(reverse("api-job-detail", args=[job.pk])).status_code == 404
    assert carol.get(reverse("api-job-list")).json()["results"] == []
    assert carol.post(reverse("api-job-cancel", args=[job.pk])).status_code == 404
    assert carol.post(reverse("api-job-approve", args=[job.pk])).status_code == 404


def test_only_a_lead_approves_through_the_api(jw, api_as, api):
    ApprovalPolicy.objects.create(max_gpus_without_approval=1)
    job = submit(jw)
    assert job.state == "pending_approval"
    resp = api_as(jw["alice"]).post(reverse("api-job-approve", args=[job.pk]))
    assert resp.status_code == 403
    api.logout()
    resp = api_as(jw["bob"]).post(reverse("api-job-approve", args=[job.pk]))
    assert resp.status_code == 200 and resp.json()["state"] == "submitted"


def test_a_lead_never_approves_their_own_job(jw, api_as, api):
    """Bob is vision's only lead: his held job goes to Research's manager, and the API says
    why he may not decide it himself."""
    ApprovalPolicy.objects.create(max_gpus_without_approval=1)
    job = submit(jw, user="bob")
    resp = api_as(jw["bob"]).post(reverse("api-job-approve", args=[job.pk]))
    assert resp.status_code == 403
    assert "Nobody decides their own request" in resp.json()["detail"]
    assert "a manager of Research (maria)" in resp.json()["detail"]
    api.logout()
    assert list(jobs_awaiting_decision(user=jw["maria"])) == [job]
    assert list(jobs_awaiting_decision(user=jw["bob"])) == []
    resp = api_as(jw["maria"]).post(reverse("api-job-approve", args=[job.pk]))
    assert resp.status_code == 200 and resp.json()["state"] == "submitted"


def test_a_held_job_nobody_else_can_decide_goes_to_the_platform_admins(jw, api_as):
    ApprovalPolicy.objects.create(max_gpus_without_approval=1)
    jw["research"].managers.clear()
    job = submit(jw, user="bob")
    assert job_approvers(job=job).describe() == "a platform admin (admin)"
    assert list(jobs_awaiting_decision(user=jw["admin"])) == [job]
    resp = api_as(jw["admin"]).post(reverse("api-job-reject", args=[job.pk]), {"reason": "no"})
    assert resp.status_code == 200 and resp.json()["state"] == "rejected"


def test_the_job_page_says_who_can_decide(jw, client):
    ApprovalPolicy.objects.create(max_gpus_without_approval=1)
    job = submit(jw)
    client.force_login(jw["alice"])
    html = client.get(reverse("job-detail", args=[job.pk])).content.decode()
    assert "Who can decide: a lead of Vision (bob)" in html
    assert "Approve</button>" not in html


def test_cancel_and_resubmit(jw, api_as):
    job = submit(jw)
    client = api_as(jw["alice"])
    resp = client.post(reverse("api-job-cancel", args=[job.pk]))
    assert resp.status_code == 200 and resp.json()["state"] == "cancelled"
    assert client.post(reverse("api-job-cancel", args=[job.pk])).status_code == 400
    resp = client.post(reverse("api-job-resubmit", args=[job.pk]))
    assert resp.status_code == 201
    assert resp.json()["resubmitted_from"] == job.pk


def test_list_filters_and_query_count(jw, api_as, django_assert_max_num_queries):
    for i in range(5):
        submit(jw, name=f"j{i}")
    submit(jw, user="bob", name="bobs")
    client = api_as(jw["alice"])
    # (Submitted jobs: what holds them back is read once for the page, two queries.)
    with django_assert_max_num_queries(10):
        data = client.get(reverse("api-job-list")).json()
    assert data["count"] == 6
    mine = client.get(reverse("api-job-list"), {"user": "bob"}).json()
    assert [j["name"] for j in mine["results"]] == ["bobs"]
    assert client.get(reverse("api-job-list"), {"state": "running"}).json()["count"] == 0


def test_patching_the_approval_policy_changes_only_what_it_names(jw, api_as):
    policy = ApprovalPolicy.objects.create(
        max_gpus_without_approval=16, max_runtime_seconds_without_approval=3600
    )
    policy.tiers_needing_approval.add(jw["tiers"]["production"])
    url = reverse("api-approval-policy")
    resp = api_as(jw["admin"]).patch(url, {"max_gpus_without_approval": 8}, format="json")
    assert resp.status_code == 200, resp.content
    body = resp.json()
    assert body["tiers_needing_approval"] == ["production"]
    assert body["max_gpus_without_approval"] == 8
    assert body["max_runtime_seconds_without_approval"] == 3600
    change = AuditEvent.objects.get(verb="approval_policy.update")
    assert change.before["max_gpus_without_approval"] == 16
    assert change.after["max_gpus_without_approval"] == 8
    assert change.after["tiers_needing_approval"] == ["production"]


def test_approval_policy_api_is_admin_only(jw, api_as, api):
    url = reverse("api-approval-policy")
    body = {"tiers_needing_approval": ["production"], "max_gpus_without_approval": 16}
    assert api_as(jw["alice"]).put(url, body, format="json").status_code == 403
    api.logout()
    resp = api_as(jw["admin"]).put(url, body, format="json")
    assert resp.status_code == 200, resp.content
    assert resp.json()["tiers_needing_approval"] == ["production"]
    assert ApprovalPolicy.objects.get().max_gpus_without_approval == 16


# ------------------------------------------------------------------------------------ pages


def test_form_submits_and_shows_field_errors(jw, client):
    client.force_login(jw["alice"])
    url = reverse("job-create")
    assert client.get(url).status_code == 200
    form = {
        "team": "vision", "name": "page job", "image": "bad image", "command": "python train.py",
        "args": "--lr 0.1", "env": "LR=0.1", "workers": 1, "gpus_per_worker": 1,
        "pool": "a100", "tier": "experiment", "gang": "on", "max_runtime_seconds": 600,
    }  # fmt: skip
    resp = client.post(url, form)
    assert resp.status_code == 200 and "Not a valid image reference" in resp.content.decode()
    form["image"] = "ghcr.io/acme/train:1"
    resp = client.post(url, form)
    job = Job.objects.get()
    assert resp.status_code == 302 and resp["Location"] == reverse("job-detail", args=[job.pk])
    assert job.command == ["python", "train.py"] and job.args == ["--lr", "0.1"]
    assert job.env == {"LR": "0.1"}


def test_preview_renders_the_objects_without_creating_anything(jw, client):
    client.force_login(jw["alice"])
    form = {
        "team": "vision", "name": "two workers", "image": "ghcr.io/acme/train:1",
        "command": "torchrun train.py", "workers": 2, "gpus_per_worker": 4, "pool": "a100",
        "tier": "experiment", "max_runtime_seconds": 600,
    }  # fmt: skip
    resp = client.post(reverse("job-preview"), form, HTTP_HX_REQUEST="true")
    html = resp.content.decode()
    assert resp.status_code == 200
    assert "kind: Service" in html and "completionMode: Indexed" in html
    assert "kueue.x-k8s.io/queue-name: vision" in html
    assert not Job.objects.exists()


def test_preview_for_any_pool_renders_for_the_cluster_the_job_would_run_on(jw, client):
    # A Volcano-only setup: "any pool" must preview the vcjob, as the submission would create.
    Cluster.objects.filter(pk=jw["cluster"].pk).update(scheduler=Cluster.Scheduler.VOLCANO)
    client.force_login(jw["alice"])
    form = {
        "team": "vision", "name": "anywhere", "image": "ghcr.io/acme/train:1",
        "command": "python train.py", "workers": 2, "gpus_per_worker": 1, "pool": "any",
        "tier": "experiment", "gang": "on", "max_runtime_seconds": 600,
    }  # fmt: skip
    html = client.post(reverse("job-preview"), form, HTTP_HX_REQUEST="true").content.decode()
    assert "kind: Job" in html and "apiVersion: batch.volcano.sh/v1alpha1" in html
    assert "schedulerName: volcano" in html and "minAvailable: 2" in html
    assert "kueue.x-k8s.io/queue-name" not in html


def test_preview_checks_what_was_typed_but_not_empty_fields(jw, client):
    client.force_login(jw["alice"])
    empty = client.post(reverse("job-preview"), {"team": "vision"}, HTTP_HX_REQUEST="true")
    assert "This field is required" not in empty.content.decode()
    typed = client.post(
        reverse("job-preview"),
        {"team": "vision", "name": "x", "workers": "0"},
        HTTP_HX_REQUEST="true",
    )
    html = typed.content.decode()
    assert "Workers: Ensure this value is greater than or equal to 1" in html
    assert "This field is required" not in html


def test_job_pages_hide_other_teams_jobs(jw, client):
    job = submit(jw)
    client.force_login(jw["carol"])
    assert client.get(reverse("job-detail", args=[job.pk])).status_code == 404
    assert client.get(reverse("job-status", args=[job.pk])).status_code == 404
    assert client.get(reverse("job-team-list", args=["vision"])).status_code == 404
    assert client.post(reverse("job-cancel", args=[job.pk])).status_code == 404


def _queries(client, url) -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as ctx:
        assert client.get(url).status_code == 200, url
    return len(ctx.captured_queries)


def test_list_pages_and_endpoint_do_not_grow_queries_with_jobs(jw, client, api_as):
    submit(jw, name="first")
    submit(jw, user="bob", name="second")
    client.force_login(jw["bob"])
    job = Job.objects.first()
    urls = [
        reverse("job-list"),
        reverse("job-team-list", args=["vision"]) + "?state=submitted&user=alice",
        reverse("job-queue", args=["vision"]),
        reverse("job-detail", args=[job.pk]),
        reverse("job-status", args=[job.pk]),
    ]
    before = {url: _queries(client, url) for url in urls}
    api = api_as(jw["bob"])
    api_before = _queries(api, reverse("api-job-list"))
    for i in range(6):
        submit(jw, user="bob", name=f"j{i}")
    assert {url: _queries(client, url) for url in urls} == before
    assert max(before.values()) <= 20
    assert _queries(api, reverse("api-job-list")) == api_before <= 10
    html = client.get(reverse("job-team-list", args=["vision"]) + "?user=bob").content.decode()
    assert html.count('href="/jobs/') >= 6


def test_oversized_form_is_400_not_500(jw, client, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    client.force_login(jw["alice"])
    resp = client.post(reverse("job-create"), {"team": "vision", "env": "A=" + "x" * 20_000})
    assert resp.status_code == 400


def test_the_same_idempotency_key_returns_the_first_job(jw, api_as):
    client = api_as(jw["alice"])
    first = client.post(reverse("api-job-list"), BODY, format="json", HTTP_IDEMPOTENCY_KEY="run-42")
    assert first.status_code == 201
    again = client.post(reverse("api-job-list"), BODY, format="json", HTTP_IDEMPOTENCY_KEY="run-42")
    assert again.status_code == 200 and again["Idempotent-Replayed"] == "true"
    assert again.json()["id"] == first.json()["id"]
    assert Job.objects.filter(owner=jw["alice"]).count() == 1
    # Another key (or none) is another job; another user's same key is theirs alone.
    other = client.post(reverse("api-job-list"), BODY, format="json", HTTP_IDEMPOTENCY_KEY="x")
    assert other.status_code == 201 and other.json()["id"] != first.json()["id"]
    bob = api_as(jw["bob"]).post(
        reverse("api-job-list"), BODY, format="json", HTTP_IDEMPOTENCY_KEY="run-42"
    )
    assert bob.status_code == 201 and bob.json()["id"] != first.json()["id"]
    long = client.post(reverse("api-job-list"), BODY, format="json",
                       HTTP_IDEMPOTENCY_KEY="k" * 201)  # fmt: skip
    assert long.status_code == 400 and "Idempotency-Key" in long.json()


def test_a_submission_while_the_broker_is_down_succeeds_and_its_message_is_kept(
    jw, api_as, monkeypatch, django_capture_on_commit_callbacks
):
    """The job is committed before the apply request is sent: a broker that is down must not
    turn that into a 500 (a retrying client would submit twice) nor lose the request."""
    from kombu.exceptions import OperationalError

    from config.celery import app
    from core.models import UnsentTask
    from core.worker import send_unsent

    def broker_down(*args, **kwargs):
        raise OperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr(app.amqp, "send_task_message", broker_down)
    with django_capture_on_commit_callbacks(execute=True):
        answer = api_as(jw["alice"]).post(reverse("api-job-list"), BODY, format="json")
    assert answer.status_code == 201
    assert Job.objects.filter(pk=answer.json()["id"], state="submitted").exists()
    (kept,) = UnsentTask.objects.all()
    assert kept.name == "queues.apply_jobs" and kept.args == [jw["cluster"].pk]
    assert send_unsent() == 0 and UnsentTask.objects.count() == 1  # still down: kept
    sent = []
    monkeypatch.setattr(app, "send_task", lambda name, args, kwargs: sent.append((name, args)))
    assert send_unsent() == 1
    assert sent == [("queues.apply_jobs", [jw["cluster"].pk])]
    assert not UnsentTask.objects.exists()


def test_the_preview_says_a_job_can_never_start_before_submit(jw, client):
    client.force_login(jw["alice"])
    form = {
        "team": "vision", "name": "huge", "image": "ghcr.io/acme/train:1",
        "command": "python train.py", "workers": 40, "gpus_per_worker": 8, "pool": "a100",
        "tier": "experiment", "max_runtime_seconds": 600,
    }  # fmt: skip
    html = client.post(reverse("job-preview"), form, HTTP_HX_REQUEST="true").content.decode()
    assert "yaml-preview" not in html
    refused = client.post(reverse("job-create"), form).content.decode()
    # The preview shows the reason the submission gives.
    import re

    reasons = re.findall(r'class="(?:form|field)-error"[^>]*>([^<]+)<', refused)
    assert reasons and any(r.split(": ", 1)[-1].strip() in html for r in reasons)
    assert not Job.objects.exists()


def test_a_held_team_is_warned_on_the_form_the_preview_and_the_home_page(jw, client):
    team = jw["vision"]
    team.queue_hold_reason = "Budget for November 2026 spent (100 EUR)."
    team.save()
    team.department.managers.add(jw["maria"])
    client.force_login(jw["alice"])
    for url in (reverse("job-create"), reverse("home")):
        page = client.get(url).content.decode()
        assert "Your team&#x27;s queue is held: Budget for November 2026 spent (100 EUR)" in page
        assert "Who can release it: maria (managing Research) or a platform admin" in page
        assert "Finance can also raise the budget" in page
    preview = client.post(reverse("job-preview"), {"team": "vision"}, HTTP_HX_REQUEST="true")
    assert 'data-testid="preview-hold"' in preview.content.decode()


def test_images_come_only_from_the_allowed_registries(jw, api_as, client):
    admin = api_as(jw["admin"])
    bad = admin.patch(
        reverse("api-approval-policy"), {"allowed_registries": ["not a host"]}, format="json"
    )
    assert bad.status_code == 400 and "not a registry host" in str(bad.json())
    saved = admin.patch(
        reverse("api-approval-policy"), {"allowed_registries": ["GHCR.io", "nvcr.io"]},
        format="json",
    )  # fmt: skip
    assert saved.json()["allowed_registries"] == ["ghcr.io", "nvcr.io"]
    assert saved.json()["max_gpus_without_approval"] is None  # a PATCH changes what it names
    alice = api_as(jw["alice"])
    refused = alice.post(
        reverse("api-job-list"), {**BODY, "image": "pytorch/pytorch:2.4"}, format="json"
    )
    assert refused.status_code == 400
    assert refused.json()["image"][0].startswith(
        "Images come from the allowed registries only (ghcr.io, nvcr.io); this one is from "
        "docker.io."
    )
    assert alice.post(reverse("api-job-list"), BODY, format="json").status_code == 201
    client.force_login(jw["alice"])
    form = {
        "team": "vision", "name": "x", "image": "docker.io/library/python:3", "command": "python",
        "workers": 1, "gpus_per_worker": 1, "pool": "a100", "tier": "experiment",
        "max_runtime_seconds": 600,
    }  # fmt: skip
    preview = client.post(reverse("job-preview"), form, HTTP_HX_REQUEST="true").content.decode()
    assert "Images come from the allowed registries only" in preview
