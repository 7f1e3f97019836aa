"""The job pages as people use them: a resubmission or a template submits as rendered, buttons
only where the action is allowed, words that agree with their numbers."""

import pytest
from django.urls import reverse

from queues.models import Job
from queues.services.jobs.templates import job_template_from_job
from tests.html import form_values
from tests.queues.builders import submit

pytestmark = pytest.mark.django_db


def _submit_as_rendered(client, url):
    """Open the job form at url and press Submit without touching a field."""
    page = client.get(url)
    assert page.status_code == 200
    return client.post(reverse("job-create"), form_values(page.content.decode(), "job-form"))


def test_a_resubmission_submits_as_rendered_and_keeps_the_spec(jw, client):
    first = submit(jw, name="again", command=["python", "train.py", "--lr", "0.1 0.2"],
                   env={"SEED": "7"}, workers=2, gpus_per_worker=1)  # fmt: skip
    client.force_login(jw["alice"])
    answer = _submit_as_rendered(client, reverse("job-create") + f"?from={first.pk}")
    assert answer.status_code == 302, answer.content.decode()[:3000]
    second = Job.objects.exclude(pk=first.pk).get()
    assert answer["Location"] == reverse("job-detail", args=[second.pk])
    assert (second.command, second.env, second.workers) == (first.command, first.env, 2)
    assert second.driver_command == [] and second.kind == Job.Kind.JOB


def test_a_template_submits_as_rendered_with_its_driver(jw, client):
    job = submit(jw, name="coordinated", kind="jobset", workers=2, gpus_per_worker=1,
                 driver_command=["python", "driver.py", "--mode", "a b"])  # fmt: skip
    template = job_template_from_job(actor=jw["alice"], job=job, name="with driver")
    plain = job_template_from_job(actor=jw["alice"], job=submit(jw, name="plain"), name="plain")
    client.force_login(jw["alice"])
    for t, driver in ((template, ["python", "driver.py", "--mode", "a b"]), (plain, [])):
        before = set(Job.objects.values_list("pk", flat=True))
        answer = _submit_as_rendered(client, reverse("job-create") + f"?template={t.pk}")
        assert answer.status_code == 302, answer.content.decode()[:3000]
        made = Job.objects.exclude(pk__in=before).get()
        assert made.driver_command == driver


def test_resubmit_and_save_as_template_only_for_the_teams_members(jw, client):
    job = submit(jw, name="watched")
    resubmit = reverse("job-create") + f"?from={job.pk}"
    for user, shown in (("alice", True), ("bob", True), ("maria", False), ("frank", False),
                        ("admin", False)):  # fmt: skip
        client.force_login(jw[user])
        page = client.get(reverse("job-detail", args=[job.pk])).content.decode()
        assert (resubmit in page) is shown, user
        assert ("Save as template" in page) is shown, user
        if not shown:  # what the button would have led to
            assert client.get(resubmit).status_code == 403


def test_counts_agree_with_their_numbers(jw, client):
    from core.text import count

    assert (count(1, "GPU"), count(0, "GPU"), count(12, "GPU")) == ("1 GPU", "0 GPUs", "12 GPUs")
    one = submit(jw, name="single", gpus_per_worker=1, pool="any")
    Job.objects.filter(pk=one.pk).update(state=Job.State.QUEUED)
    client.force_login(jw["alice"])
    page = client.get(reverse("job-detail", args=[one.pk])).content.decode()
    assert "1 × 1 GPU (gang)<" in page
    queue = client.get(reverse("job-queue", args=["vision"])).content.decode()
    assert "· 1 GPU ·" in queue and "1 GPUs" not in queue


def test_the_timeline_tells_one_story_in_order_of_time_and_cause(jw, client):
    """Events carry whole seconds of the cluster's clock (which may lag ours); states carry
    ours. The page orders them as one story, folds Kueue's "Admitted" into the state change
    and gives every time its zone."""
    from datetime import timedelta

    from queues.models import JobEvent, JobTransition

    job = submit(jw, name="story")
    submitted = job.transitions.get()
    t0 = submitted.at.replace(microsecond=700_000)
    JobTransition.objects.filter(pk=submitted.pk).update(at=t0)
    s = timedelta(seconds=1)

    def state(to, at, reason=""):
        JobTransition.objects.create(job=job, from_state="", to_state=to, at=at, reason=reason)

    state("queued", t0 + timedelta(microseconds=1))
    state("admitted", t0.replace(microsecond=0) + 2 * s)
    state("running", t0.replace(microsecond=0) + 3 * s)
    state("succeeded", t0.replace(microsecond=0) + 9 * s)
    whole = t0.replace(microsecond=0)
    pod = "Pod/story-0"
    for at, reason, obj, message in (
        (whole - s, "CreatedWorkload", "Workload/story", "Created Workload"),  # clock lag
        (whole + 2 * s, "Admitted", "Workload/story", "Admitted by ClusterQueue qm-vision"),
        (whole + 2 * s, "QuotaReserved", "Workload/story", "Quota reserved"),
        (whole + 3 * s, "Started", pod, "Started container main"),
        (whole + 3 * s, "Pulled", pod, "Image present"),
        (whole + 3 * s, "Scheduled", pod, "Successfully assigned"),
    ):
        JobEvent.objects.create(job=job, at=at, reason=reason, object=obj, message=message)
    Job.objects.filter(pk=job.pk).update(state="succeeded", events_kept_at=whole + 60 * s)
    client.force_login(jw["alice"])
    html = client.get(reverse("job-detail", args=[job.pk])).content.decode()
    timeline = html[html.index('data-testid="timeline"') :].split("</ol>")[0]
    labels = [chunk.split("</strong>")[0] for chunk in timeline.split("<strong>")[1:]]
    assert labels == [
        "Submitted", "CreatedWorkload", "Queued", "QuotaReserved", "Admitted", "Scheduled",
        "Pulled", "Started", "Running", "Succeeded",
    ]  # fmt: skip
    assert "Admitted by ClusterQueue qm-vision" in timeline  # folded into the state change
    assert timeline.count(" UTC</time>") == len(labels)


def test_the_form_folds_advanced_fields_and_opens_a_section_that_holds_something(jw, client):
    from queues.forms.jobs import JobForm

    form = JobForm(user=jw["alice"])
    placed = set(JobForm.BASIC) | {n for _, names in JobForm.SECTIONS for n in names}
    assert set(form.fields) <= placed  # every field is shown somewhere
    assert not any(s["open"] for s in form.sections())
    client.force_login(jw["alice"])
    page = client.get(reverse("job-create")).content.decode()
    assert page.count('<details class="form-section">') == len(form.sections())
    job = submit(jw, name="with env", env={"SEED": "7"}, gpus_per_worker=1)
    again = client.get(reverse("job-create"), {"from": job.pk}).content.decode()
    assert '<details class="form-section" open>\n    <summary>Arguments and environment' in again
    # The earlier job's resources were resolved to numbers: they are shown too; nothing else.
    assert '<details class="form-section" open>\n    <summary>Resources and volumes' in again
    assert again.count('<details class="form-section" open>') == 2
    typed = {"name": "x", "image": "ghcr.io/a/b:1", "command": "python t.py", "cpu": "lots"}
    bad = client.post(reverse("job-create"), {**form_values(page, "job-form"), **typed})
    assert '<details class="form-section" open>\n    <summary>Resources and volumes' in (
        bad.content.decode()
    )


def test_a_sweeps_preview_says_how_many_jobs_it_makes(jw, client):
    client.force_login(jw["alice"])
    page = client.get(reverse("job-create")).content.decode()
    values = {**form_values(page, "job-form"), "name": "lr", "image": "ghcr.io/a/b:1",
              "command": "python t.py", "gpus_per_worker": "1"}  # fmt: skip
    preview = client.post(
        reverse("job-preview"), {**values, "sweep": "LR=0.1,0.01,0.001\n--seed=1,2"}
    )
    assert "This sweep creates <strong>6 jobs</strong>" in preview.content.decode()
    assert "1 worker of 1 GPU each" in preview.content.decode()
    too_many = client.post(reverse("job-preview"), {**values, "sweep": "A=" + ",".join(
        map(str, range(11))) + "\nB=" + ",".join(map(str, range(10)))})  # fmt: skip
    assert "That grid makes 110 jobs; a sweep makes at most 100." in too_many.content.decode()
    plain = client.post(reverse("job-preview"), values).content.decode()
    assert "sweep-count" not in plain and "yaml-preview" in plain


def test_the_job_page_reloads_its_logs_and_use_while_they_can_change(jw, client):
    import re
    from datetime import timedelta

    from django.utils import timezone

    from queues.models import JobPod

    job = submit(jw, name="live")
    client.force_login(jw["alice"])

    def pods_keys():
        page = client.get(reverse("job-detail", args=[job.pk])).content.decode()
        status = client.get(reverse("job-status", args=[job.pk])).content.decode()
        logs = re.search(r'id="job-logs"[^>]*data-pods="([^"]*)"', page).group(1)
        return logs, re.search(r'id="job-status"[^>]*data-pods="([^"]*)"', status).group(1)

    assert pods_keys() == ("", "")
    JobPod.objects.create(job=job, name="live-0", namespace=job.team.namespace, gpus=2)
    assert pods_keys() == ("live-0 ", "live-0 ")  # the page compares them (app.js)
    usage = client.get(reverse("billing-job-usage", args=[job.pk])).content.decode()
    assert 'hx-trigger="every 5s"' in usage  # samples may arrive
    ended = timezone.now() - timedelta(minutes=10)
    Job.objects.filter(pk=job.pk).update(state="succeeded", finished_at=ended)
    assert pods_keys() == ("live-0 ended", "live-0 ended")
    usage = client.get(reverse("billing-job-usage", args=[job.pk])).content.decode()
    assert "hx-trigger" not in usage  # the last samples are in


def test_an_approved_quota_request_page_follows_it_until_applied(quota_world, client):
    from queues.models import QuotaRequest
    from queues.services.quotas import quota_request_approve, quota_request_create

    w = quota_world
    request = quota_request_create(actor=w["bob"], team=w["vision"], pool=w["a100"],
                                   nominal_gpus=12, justification="x")  # fmt: skip
    quota_request_approve(quota_request=request, approver=w["maria"])
    client.force_login(w["bob"])
    url = reverse("quota-request-detail", args=[request.pk])
    page = client.get(url).content.decode()
    assert 'hx-select="#request-live" hx-trigger="every 2s"' in page
    assert "Reload to see it applied" not in page
    QuotaRequest.objects.filter(pk=request.pk).update(
        state="applied", applied_at=request.created_at
    )
    assert "hx-trigger" not in client.get(url).content.decode().split('id="request-live"')[1][:300]
