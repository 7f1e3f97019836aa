"""Job templates: members save a job (or a spec) as their team's template and start jobs from it;
other teams neither see nor use it; whoever saved it, a lead or a platform admin deletes it."""

from django.urls import reverse

from queues.models import Job, JobTemplate
from tests.queues.builders import submit
from tests.queues.test_job_api import BODY

URL = "/api/v1/job-templates/"


def test_a_member_saves_a_spec_and_a_job_as_templates_through_the_api(jw, api_as):
    alice = api_as(jw["alice"])
    made = alice.post(URL, {"team": "vision", "name": "resnet", "spec": BODY}, format="json")
    assert made.status_code == 201, made.content
    assert made.json()["spec"]["pool"] == "a100" and made.json()["spec"]["command"] == [
        "python", "train.py"
    ]  # fmt: skip
    job = submit(jw, name="detector", workers=2, gpus_per_worker=1, retry_limit=1)
    from_job = alice.post(URL, {"name": "detector", "from_job": job.pk}, format="json")
    assert from_job.status_code == 201
    assert from_job.json()["spec"]["workers"] == 2 and from_job.json()["spec"]["retry_limit"] == 1
    again = alice.post(URL, {"team": "vision", "name": "resnet", "spec": BODY}, format="json")
    assert again.status_code == 400 and "already has a template" in again.json()["name"][0]
    bad = alice.post(URL, {"team": "vision", "name": "x", "spec": {"image": "bad image"}},
                     format="json")  # fmt: skip
    assert bad.status_code == 400 and {"image", "command"} <= set(bad.json())
    assert alice.get(URL).json()["count"] == 2


def test_other_teams_neither_see_nor_save_nor_delete_templates(jw, api_as):
    alice = api_as(jw["alice"])
    template_id = alice.post(
        URL, {"team": "vision", "name": "resnet", "spec": BODY}, format="json"
    ).json()["id"]
    carol = api_as(jw["carol"])  # nlp
    assert carol.get(URL).json()["count"] == 0
    assert carol.get(f"{URL}{template_id}/").status_code == 404
    assert carol.delete(f"{URL}{template_id}/").status_code == 404
    refused = carol.post(URL, {"team": "vision", "name": "mine", "spec": BODY}, format="json")
    assert refused.status_code == 400 and "not a member" in refused.json()["team"][0]
    job = submit(jw, name="theirs")
    unseen = carol.post(URL, {"name": "x", "from_job": job.pk}, format="json")
    assert unseen.status_code == 400 and "that you can see" in unseen.json()["from_job"][0]
    # The lead of the team may delete alice's template; maria (manager) sees but may not.
    maria = api_as(jw["maria"])
    assert maria.get(f"{URL}{template_id}/").status_code == 200
    assert maria.delete(f"{URL}{template_id}/").status_code == 403
    assert api_as(jw["bob"]).delete(f"{URL}{template_id}/").status_code == 204
    assert not JobTemplate.objects.exists()


def test_save_a_job_as_a_template_and_start_a_job_from_it_in_the_pages(jw, client):
    job = submit(jw, name="sweep base", workers=2, gpus_per_worker=1)
    client.force_login(jw["alice"])
    answer = client.post(reverse("job-save-template", args=[job.pk]), {"name": "base"},
                         follow=True)  # fmt: skip
    assert "Saved as template “base”" in answer.content.decode()
    template = JobTemplate.objects.get()
    listing = client.get(reverse("job-list")).content.decode()
    assert f"?template={template.pk}" in listing
    form = client.get(reverse("job-create"), {"template": template.pk}).content.decode()
    assert 'value="sweep base"' in form and 'name="workers" value="2"' in form
    assert client.get(reverse("job-create"), {"template": 99999}).status_code == 404
    client.force_login(jw["carol"])
    assert client.get(reverse("job-create"), {"template": template.pk}).status_code == 404
    client.force_login(jw["alice"])
    client.post(reverse("job-template-delete", args=[template.pk]))
    assert not JobTemplate.objects.exists() and Job.objects.count() == 1
