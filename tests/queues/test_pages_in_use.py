"""The pages as people use them: limits said and counted, long and non-Latin names, no dead
ends for people in no team, the audit log's filters, a favicon."""

import re

import pytest
from django.urls import reverse

from fleet.validators import to_dns1123_label
from queues.manifests.jobs import job_k8s_name
from queues.models import AuditEvent, Job
from queues.services.audit import audit
from tests.queues.builders import submit

FORM = {
    "team": "vision", "name": "long command", "image": "ghcr.io/acme/train:1",
    "workers": 1, "gpus_per_worker": 1, "pool": "a100", "tier": "experiment",
    "max_runtime_seconds": 600,
}  # fmt: skip


def test_a_command_over_the_limit_is_refused_by_the_server_and_the_field_counts(jw, client):
    client.force_login(jw["alice"])
    page = client.get(reverse("job-create")).content.decode()
    command = re.search(r"<(?:input|textarea)[^>]*name=\"command\"[^>]*>", page).group(0)
    assert "maxlength" not in command  # the browser must not cut it silently
    assert 'data-count-max="8000"' in command
    answer = client.post(reverse("job-create"), {**FORM, "command": "x" * 10_000})
    assert answer.status_code == 200
    assert "at most 8000 characters (it has 10000)" in answer.content.decode()
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    "name, expected",
    [("名前🚀", "mingqian-rocket-7"), ("Обучение модели", "obuchenie-modeli-7"),
     ("Ünïcödé résumé", "unicode-resume-7"), ("🚀🚀", "rocket-rocket-7")],
)  # fmt: skip
def test_names_in_any_script_become_readable_cluster_names(name, expected):
    assert job_k8s_name(name=name, job_id=7) == expected
    assert to_dns1123_label("日本") == "riben"


def test_the_job_page_shows_the_cluster_name_and_long_names_wrap(jw, client):
    job = submit(jw, name="名前🚀 " + "y" * 190)
    client.force_login(jw["alice"])
    page = client.get(reverse("job-detail", args=[job.pk])).content.decode()
    assert f"{job.team.namespace}/{job.k8s_name}" in page
    assert job.k8s_name.startswith("mingqian-rocket-yyy")
    assert '<h1 class="job-name">' in page
    listing = client.get(reverse("job-list")).content.decode()
    assert f'class="truncate" href="/jobs/{job.pk}/" title="{job.name}"' in listing


def test_people_in_no_team_are_told_how_to_join_instead_of_a_dead_link(world, client):
    client.force_login(world["frank"])
    page = client.get(reverse("job-list")).content.decode()
    assert reverse("job-create") not in page
    assert "You are not a member of any team" in page and "add you" in page
    client.force_login(world["alice"])
    assert reverse("job-create") in client.get(reverse("job-list")).content.decode()


def test_the_approval_policy_is_in_the_navigation_for_platform_admins(world, client):
    client.force_login(world["admin"])
    assert reverse("job-approval-policy") in client.get(reverse("home")).content.decode()
    client.force_login(world["alice"])
    assert reverse("job-approval-policy") not in client.get(reverse("home")).content.decode()


def test_the_audit_log_filters_by_actor_team_kind_and_date(world, client):
    vision, nlp = world["vision"], world["nlp"]
    audit(actor=world["bob"], verb="job.cancel", obj=vision, team=vision, message="one")
    audit(actor=world["maria"], verb="quota_request.approve", obj=nlp, team=nlp, message="two")
    audit(actor=None, verb="managed_object.apply", obj=vision, team=vision, message="three")
    AuditEvent.objects.filter(message="one").update(created_at="2026-01-05T10:00:00Z")
    client.force_login(world["admin"])
    url = reverse("quota-audit")

    def shown(**query):
        html = client.get(url, query).content.decode()
        return {m for m in ("one", "two", "three") if f"<td>{m}" in html}

    assert shown() == {"one", "two", "three"}
    assert shown(actor="bob") == {"one"}
    assert shown(actor="system") == {"three"}
    assert shown(team="nlp") == {"two"}
    assert shown(kind="quota_request") == {"two"}
    assert shown(until="2026-01-31") == {"one"}
    assert shown(since="2026-02-01") == {"two", "three"}


def test_favicon_ico_leads_to_the_icon(client):
    answer = client.get("/favicon.ico")
    assert answer.status_code == 301 and answer["Location"].endswith("img/favicon.svg")


def test_job_lists_page_by_keyset_with_filters_kept(jw, client, django_assert_max_num_queries):
    from queues.views.jobs import PAGE_SIZE

    jobs = [submit(jw, name=f"run {i}") for i in range(PAGE_SIZE + 3)]
    client.force_login(jw["alice"])
    first = client.get(reverse("job-team-list", args=["vision"]), {"state": "submitted"})
    html = first.content.decode()
    newest = sorted(j.pk for j in jobs)[-PAGE_SIZE:]
    assert all(f"/jobs/{pk}/" in html for pk in newest)
    cursor = re.search(r'before=(\d+)" rel="next"', html).group(1)
    assert int(cursor) == min(newest) and "state=submitted&amp;before=" in html
    with django_assert_max_num_queries(12):
        older = client.get(
            reverse("job-team-list", args=["vision"]), {"state": "submitted", "before": cursor}
        ).content.decode()
    assert sum(f'/jobs/{j.pk}/"' in older for j in jobs) == 3
    assert client.get(reverse("job-list"), {"before": "junk"}).status_code == 200
