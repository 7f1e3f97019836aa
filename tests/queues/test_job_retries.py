"""A retry limit per job: validated, rendered as the Job's backoffLimit, and each re-run of a
failed worker on the timeline with its exit code (against kubesim)."""

import pytest
from django.urls import reverse

from fleet import kube
from fleet.models import Cluster
from queues.backends import backend_named
from queues.models import Job
from tests.queues.builders import submit, sync_until
from tests.queues.test_job_api import BODY


@pytest.mark.parametrize("limit", [-1, 11, "many"])
def test_a_retry_limit_outside_0_to_10_is_a_field_error(jw, api_as, limit):
    answer = api_as(jw["alice"]).post(
        reverse("api-job-list"), {**BODY, "retry_limit": limit}, format="json"
    )
    assert answer.status_code == 400 and "retry_limit" in answer.json()


def test_the_retry_limit_is_the_jobs_backoff_limit_and_read_back(jw, api_as):
    answer = api_as(jw["alice"]).post(
        reverse("api-job-list"), {**BODY, "retry_limit": 3}, format="json"
    )
    assert answer.status_code == 201 and answer.json()["retry_limit"] == 3
    job = Job.objects.get(pk=answer.json()["id"])
    (batch,) = [o for o in backend_named("kueue").job_objects(job) if o["kind"] == "Job"]
    assert batch["spec"]["backoffLimit"] == 3
    # Resubmitting keeps it.
    again = api_as(jw["alice"]).post(reverse("api-job-resubmit", args=[job.pk]))
    assert again.json()["retry_limit"] == 3


def test_volcano_clusters_refuse_a_retry_limit_with_the_reason(jw, api_as):
    Cluster.objects.filter(pk=jw["cluster"].pk).update(scheduler=Cluster.Scheduler.VOLCANO)
    answer = api_as(jw["alice"]).post(
        reverse("api-job-list"), {**BODY, "retry_limit": 2}, format="json"
    )
    assert answer.status_code == 400
    assert "restarts the whole gang" in answer.json()["retry_limit"][0]


def test_each_retry_is_on_the_timeline_and_the_job_fails_past_the_limit(sim_jobs, client):
    job = submit(sim_jobs, name="flaky", gpus_per_worker=1, retry_limit=2)
    job = Job.objects.select_related("team", "tier", "pool", "cluster").get(pk=job.pk)
    client_k = kube.client_for(job.cluster)
    for obj in backend_named("kueue").job_objects(job):
        if obj["kind"] == "Job":  # every run of the worker exits 3, after a second
            meta = obj["spec"]["template"]["metadata"].setdefault("annotations", {})
            meta.update({"kubesim.dev/exit-code": "3", "kubesim.dev/duration-seconds": "1"})
        client_k.apply(obj)
    sync_until(job, Job.State.FAILED, timeout=40)
    assert job.state == Job.State.FAILED
    assert job.retries == 2  # the first run and both re-runs failed; the third ended it
    retried = [t.reason for t in job.transitions.all() if "runs it again" in t.reason]
    assert retried == [
        "A worker failed (exit code 3); the cluster runs it again (retry 1 of 2).",
        "A worker failed (exit code 3); the cluster runs it again (retry 2 of 2).",
    ]
    client.force_login(sim_jobs["alice"])
    page = client.get(reverse("job-detail", args=[job.pk])).content.decode()
    assert ">2 of 2 used<" in page and "retry 2 of 2" in page
    assert job.exit_reason.endswith(
        "exited with code 3 (Error). It had been run again 2 times, the job's retry limit."
    )


def test_a_jobset_fails_once_its_restarts_of_the_set_are_used_up(sim_jobs):
    """A JobSet restarts all its workers for a failed one, up to its retry limit (its failure
    policy's maxRestarts); then it fails for having reached them (JobSet's ReachedMaxRestarts),
    and the job says so with the exit code."""
    job = submit(sim_jobs, name="doomed", kind="jobset", workers=2, gpus_per_worker=1,
                 retry_limit=1)  # fmt: skip
    job = Job.objects.select_related("team", "tier", "pool", "cluster").get(pk=job.pk)
    client_k = kube.client_for(job.cluster)
    for obj in backend_named("kueue").job_objects(job):
        if obj["kind"] == "JobSet":  # every worker exits 3, after a second
            for replicated in obj["spec"]["replicatedJobs"]:
                meta = replicated["template"]["spec"]["template"].setdefault("metadata", {})
                meta.setdefault("annotations", {}).update(
                    {"kubesim.dev/exit-code": "3", "kubesim.dev/duration-seconds": "1"}
                )
        client_k.apply(obj)
    sync_until(job, Job.State.FAILED, timeout=40)
    assert job.state == Job.State.FAILED
    assert job.retries == 1
    assert "exited with code 3" in job.exit_reason
    assert job.exit_reason.endswith(
        "Its workers had been restarted together 1 time, the job's retry limit."
    )
    jobset = client_k.get("jobset.x-k8s.io/v1alpha2", "JobSet", job.k8s_name, job.team.namespace)
    (failed,) = [c for c in jobset["status"]["conditions"] if c["type"] == "Failed"]
    assert failed["reason"] == "ReachedMaxRestarts"
