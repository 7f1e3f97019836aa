"""A job's logs in the portal: the API and the job page read them from kubesim while the pod is
there; the end of each log is kept when the pod ends; only the team and platform admins read."""

from django.urls import reverse

from queues.models import Job, JobPod
from queues.services.jobs.apply import job_apply
from queues.services.jobs.sync import jobs_sync_cluster
from tests.queues.builders import submit, sync_until


def _running(sim_jobs, **kw):
    job = submit(sim_jobs, name="logger", gpus_per_worker=1, **kw)
    assert job_apply(job_id=job.pk) == "applied"
    return sync_until(job, Job.State.RUNNING)


def test_the_team_reads_a_running_pods_log_and_others_do_not(sim_jobs, api_as):
    job = _running(sim_jobs, expected_runtime_seconds=60)
    url = reverse("api-job-logs", args=[job.pk])
    sim_jobs["sim"].sim.clock.advance(4.5)  # a few training steps
    answer = api_as(sim_jobs["alice"]).get(url, {"tail": 2})
    assert answer.status_code == 200 and answer["Content-Type"].startswith("text/plain")
    lines = answer.content.decode().splitlines()
    assert len(lines) == 2 and lines[-1].startswith("step ")
    whole = api_as(sim_jobs["alice"]).get(url, {"tail": 1000}).content.decode()
    assert whole.startswith("[rank 0] starting on a100-node-")
    download = api_as(sim_jobs["bob"]).get(url, {"download": 1})
    assert download["Content-Disposition"] == f'attachment; filename="job-{job.pk}.log"'
    # The department's manager sees the job but not its log; another team not even the job.
    refused = api_as(sim_jobs["maria"]).get(url)
    assert refused.status_code == 403 and "team" in refused.json()["detail"]
    assert api_as(sim_jobs["carol"]).get(url).status_code == 404
    assert api_as(sim_jobs["alice"]).get(url, {"pod": "nope"}).status_code == 400
    assert api_as(sim_jobs["alice"]).get(url, {"tail": "all"}).status_code == 400


def test_a_followed_log_streams_until_the_pod_ends(sim_jobs, api_as):
    job = _running(sim_jobs, expected_runtime_seconds=4)
    answer = api_as(sim_jobs["alice"]).get(
        reverse("api-job-logs", args=[job.pk]), {"follow": "true", "tail": 0}
    )
    with sim_jobs["sim"].sim.faster(4):  # its four seconds pass in one
        text = b"".join(answer.streaming_content).decode()
    assert text.rstrip().endswith("steps") and "step 1 " in text


def test_the_end_of_a_log_is_kept_when_the_pod_ends_and_served_after_it_is_gone(sim_jobs, api_as):
    job = _running(sim_jobs, expected_runtime_seconds=3)
    job = sync_until(job, Job.State.SUCCEEDED)
    pod = JobPod.objects.get(job=job)
    assert pod.log_tail.rstrip().endswith("steps")
    sim_jobs["sim"].kube.delete("v1", "Pod", pod.name, pod.namespace)
    kept = api_as(sim_jobs["alice"]).get(reverse("api-job-logs", args=[job.pk]), {"tail": 1})
    assert kept.content.decode().startswith("training finished after")
    jobs_sync_cluster(cluster=job.cluster)  # the kept log is not fetched again
    assert JobPod.objects.get(pk=pod.pk).log_tail == pod.log_tail


def test_the_job_page_shows_the_log_to_the_team_only(sim_jobs, client):
    job = _running(sim_jobs, expected_runtime_seconds=60)
    client.force_login(sim_jobs["alice"])
    page = client.get(reverse("job-detail", args=[job.pk])).content.decode()
    assert 'data-testid="logs"' in page and "Download" in page
    part = client.get(reverse("job-log", args=[job.pk]), {"tail": 50}).content.decode()
    assert "[rank 0] starting on" in part
    client.force_login(sim_jobs["maria"])
    assert (
        'data-testid="logs"'
        not in client.get(reverse("job-detail", args=[job.pk])).content.decode()
    )
