"""Requests an outside test found answered with a server error or let through, each now the 400,
404, 405 or 422 that says what to fix: a log tail in non-ASCII digits, a team moved onto
another team's namespace or a system namespace, ids that are not integers, member fair sharing
posted as a form, mount paths that climb out or over the container's own, an Idempotency-Key
reused for another body; and job environment values hidden wherever the jobs API hides them."""

from __future__ import annotations

import pytest
from django.urls import reverse

from queues.models import Job, Membership, Team, TeamVolume
from tests.queues.builders import submit
from tests.queues.test_job_api import BODY

JOBS = "/api/v1/jobs/"


@pytest.mark.parametrize("tail", ["²", "٣", "¹⁰", "-1", "1.5", ""])
def test_a_log_tail_that_is_not_ascii_digits_is_a_400(jw, api_as, client, tail):
    job = submit(jw)
    answer = api_as(jw["alice"]).get(f"{JOBS}{job.pk}/logs/", {"tail": tail})
    assert answer.status_code == 400, answer.content
    assert "tail" in answer.json()
    client.force_login(jw["alice"])
    page = client.get(reverse("job-log", args=[job.pk]), {"tail": tail})
    assert page.status_code == 200  # the page's poll reads the default tail instead


def test_a_team_cannot_be_moved_onto_another_teams_namespace(jw, api_as):
    answer = api_as(jw["admin"]).patch(
        "/api/v1/teams/vision/", {"namespace": jw["nlp"].namespace}, format="json"
    )
    assert answer.status_code == 400, answer.content
    assert "namespace" in answer.json()
    assert Team.objects.get(slug="vision").namespace == jw["vision"].namespace


@pytest.mark.parametrize(
    "namespace",
    ["kube-system", "kube-public", "kube-node-lease", "default", "kueue-system",
     "volcano-system", "kube-anything", "quartermaster"],
)  # fmt: skip
def test_a_team_cannot_have_a_system_namespace(jw, api_as, namespace):
    admin = api_as(jw["admin"])
    created = admin.post(
        "/api/v1/teams/",
        {"slug": "ops", "name": "Ops", "department": "research", "namespace": namespace},
        format="json",
    )
    assert created.status_code == 400, created.content
    assert "reserved" in created.json()["namespace"][0]
    moved = admin.patch("/api/v1/teams/vision/", {"namespace": namespace}, format="json")
    assert moved.status_code == 400 and "namespace" in moved.json()
    assert not Team.objects.filter(namespace=namespace).exists()


def test_a_teams_slug_that_would_be_a_system_namespace_is_refused(jw, api_as):
    # Without a namespace, the team's namespace is its slug.
    answer = api_as(jw["admin"]).post(
        "/api/v1/teams/", {"slug": "default", "name": "D", "department": "research"}, format="json"
    )
    assert answer.status_code == 400 and "namespace" in answer.json(), answer.content


def test_extra_reserved_namespaces_come_from_the_settings(jw, api_as, settings):
    settings.TEAM_NAMESPACES_RESERVED = ["monitoring"]
    answer = api_as(jw["admin"]).post(
        "/api/v1/teams/",
        {"slug": "ops", "name": "Ops", "department": "research", "namespace": "monitoring"},
        format="json",
    )
    assert answer.status_code == 400 and "namespace" in answer.json()


@pytest.mark.parametrize(
    "url",
    ["/api/v1/volumes/1.5/", "/api/v1/secrets/1.5/", "/api/v1/volumes/abc/",
     "/api/v1/secrets/%C2%B2/", "/api/v1/jobs/1.5/", "/api/v1/jobs/1.5/cancel/",
     "/api/v1/job-templates/1.5/", "/api/v1/volumes.json", "/api/v1/volumes/1.json"],
)  # fmt: skip
@pytest.mark.parametrize("method", ["get", "patch", "delete", "post"])
def test_an_id_that_is_not_an_integer_is_a_404(jw, api_as, url, method):
    answer = getattr(api_as(jw["bob"]), method)(url, {}, format="json")
    assert answer.status_code in (404, 405), (answer.status_code, answer.content[:200])


def test_member_fair_sharing_takes_get_and_post_and_a_form_post_keeps_what_it_omits(jw, api_as):
    url = "/api/v1/teams/vision/member-fair-sharing/"
    maria = api_as(jw["maria"])
    assert maria.post(url, {"enabled": True}, format="json").status_code == 200
    # A form-encoded post that only weighs a member leaves sharing on.
    answer = maria.post(url, {"weights.alice": "2"})
    assert answer.status_code == 200, answer.content
    assert answer.json()["enabled"] is True
    assert Team.objects.get(slug="vision").member_fair_sharing is True
    assert str(Membership.objects.get(user=jw["alice"]).fair_share_weight) == "2.000"
    for method in ("put", "patch", "delete"):
        assert getattr(maria, method)(url, {}, format="json").status_code == 405


def test_a_member_weighed_zero_whose_use_is_reported_is_listed_last_not_a_server_error(
    jw, api_as, client
):
    """Weight 0 makes a member's use count without end (Kueue serves them last); JSON has no
    infinity, so the API says null there and the page and the order still say it."""
    from queues.manifests.quotas import member_queue_name
    from queues.models import ManagedObject

    url = "/api/v1/teams/vision/member-fair-sharing/"
    vision = jw["vision"]
    for user, consumed in [(jw["alice"], "3"), (jw["bob"], "4")]:
        ManagedObject.objects.create(
            cluster=jw["cluster"], api_version="kueue.x-k8s.io/v1beta2", kind="LocalQueue",
            namespace=vision.namespace, name=member_queue_name(vision, user), owner_type="team",
            owner_id=vision.pk, live_status={"fairSharing": {"admissionFairSharingStatus": {
                "consumedResources": {"nvidia.com/gpu": consumed}}}},
        )  # fmt: skip
    maria = api_as(jw["maria"])
    answer = maria.post(url, {"enabled": True, "weights": {"alice": 0}}, format="json")
    assert answer.status_code == 200, answer.content[:300]
    members = [(m["username"], m["weight"], m["usage"]) for m in answer.json()["members"]]
    assert members == [("bob", "1.000", 4.0), ("alice", "0.000", None)]
    assert maria.get(url).status_code == 200
    client.force_login(jw["maria"])
    page = client.get(reverse("team-detail", args=["vision"]))
    assert page.status_code == 200
    assert (
        "inf"
        not in page.content.decode().split('data-testid="member-share"')[1].split("</section>")[0]
    )


@pytest.mark.parametrize(
    "path",
    ["/data/../..", "/data/..", "/var/run/secrets/kubernetes.io",
     "/var/run/secrets/kubernetes.io/serviceaccount", "/run/secrets/kubernetes.io", "/etc/ssl",
     "/proc/self", "/dev/shm/x", "/./etc", "/var/run/secrets/", "/sys/fs/cgroup"],
)  # fmt: skip
def test_a_mount_path_that_climbs_out_or_covers_the_containers_own_is_refused(jw, api_as, path):
    TeamVolume.objects.create(team=jw["vision"], cluster=jw["cluster"], name="data", size_gib=1)
    answer = api_as(jw["alice"]).post(
        JOBS, {**BODY, "volumes": [{"volume": "data", "mount_path": path}]}, format="json"
    )
    assert answer.status_code == 400, answer.content
    assert "volumes" in answer.json()
    assert not Job.objects.exists()


@pytest.mark.parametrize("path", ["/ckpt/../etc", "/var/run/secrets/kubernetes.io", "ckpt"])
def test_a_checkpoint_path_is_checked_as_a_mount_path(jw, api_as, path):
    TeamVolume.objects.create(team=jw["vision"], cluster=jw["cluster"], name="data", size_gib=1)
    answer = api_as(jw["alice"]).post(
        JOBS, {**BODY, "checkpoint_volume": "data", "checkpoint_path": path}, format="json"
    )
    assert answer.status_code == 400, answer.content
    assert {"checkpoint_path", "volumes"} & set(answer.json())


def test_a_mount_path_is_kept_normalised(jw, api_as):
    TeamVolume.objects.create(team=jw["vision"], cluster=jw["cluster"], name="data", size_gib=1)
    answer = api_as(jw["alice"]).post(
        JOBS, {**BODY, "volumes": [{"volume": "data", "mount_path": "/data/./set/"}]}, format="json"
    )
    assert answer.status_code == 201, answer.content
    assert Job.objects.get().volumes[0]["mount_path"] == "/data/set"


def test_an_idempotency_key_reused_with_another_body_is_a_422(jw, api_as):
    client = api_as(jw["alice"])
    key = {"HTTP_IDEMPOTENCY_KEY": "nightly-42"}
    first = client.post(JOBS, BODY, format="json", **key)
    assert first.status_code == 201
    again = client.post(JOBS, BODY, format="json", **key)
    assert again.status_code == 200 and again["Idempotent-Replayed"] == "true"
    assert again.json()["id"] == first.json()["id"]
    other = client.post(JOBS, {**BODY, "gpus_per_worker": 4}, format="json", **key)
    assert other.status_code == 422, other.content
    detail = other.json()["detail"]
    assert "nightly-42" in detail and f"#{first.json()['id']}" in detail
    assert Job.objects.count() == 1


ENV = {"WANDB_API_KEY": "s3cret-value"}


def _env_values(data) -> list:
    """Every value under an "env" key in an answer, at any depth."""
    found = []
    if isinstance(data, dict):
        for key, value in data.items():
            if key == "env" and isinstance(value, dict):
                for item in value.values():  # a sweep grid's lists its values
                    found += item if isinstance(item, list) else [item]
            else:
                found += _env_values(value)
    elif isinstance(data, list):
        for item in data:
            found += _env_values(item)
    return found


def test_environment_values_are_hidden_in_templates_sweeps_and_the_audit(jw, api_as, api, client):
    alice = api_as(jw["alice"])
    spec = {**BODY, "env": ENV}
    saved = alice.post("/api/v1/job-templates/", {"team": "vision", "name": "nightly",
                                                   "spec": spec}, format="json")  # fmt: skip
    assert saved.status_code == 201
    grid = {"env": {"WANDB_API_KEY": ["s3cret-value", "other-s3cret"]}}
    swept = alice.post("/api/v1/sweeps/", {**BODY, "grid": grid}, format="json")
    assert swept.status_code == 201, swept.content
    sweep_id = swept.json()["id"]
    reads = ["/api/v1/job-templates/", "/api/v1/sweeps/", f"/api/v1/sweeps/{sweep_id}/",
             "/api/v1/audit-events/"]  # fmt: skip
    for reader, sees in [("alice", True), ("admin", True), ("maria", False), ("frank", False)]:
        api.logout()
        client_as = api_as(jw[reader])
        for url in reads:
            if url == "/api/v1/audit-events/" and reader in ("alice", "frank"):
                continue  # the audit log is for managers and platform admins
            values = _env_values(client_as.get(url).json())
            if sees:
                assert "s3cret-value" in values, (reader, url)
            else:
                assert values and set(values) == {None}, (reader, url, values)
    client.force_login(jw["maria"])
    page = client.get(reverse("job-sweep", args=[sweep_id]))
    assert page.status_code == 200
    # The grid says which variable varies, not its values (the jobs' names carry each job's
    # combination, as they always have).
    grid_line = page.content.decode().split("<code>WANDB_API_KEY</code> ∈ ")[1].split("<")[0]
    assert grid_line == "hidden"


@pytest.mark.parametrize("cluster", ["50%", "¯%Ù", "%s", "%(x)s"])
def test_a_percent_sign_in_input_an_error_quotes_is_a_400_not_a_500(jw, api_as, cluster):
    """Found by the schema property tests (#32): the API's error handler formatted every
    error message with %, so a message quoting input with a '%' raised instead of answering."""
    answer = api_as(jw["bob"]).post(
        "/api/v1/secrets/",
        {"team": "vision", "cluster": cluster, "name": "hf", "values": {"k": "v"}},
        format="json",
    )
    assert answer.status_code == 400, answer.content
    assert cluster in answer.json()["cluster"][0]
