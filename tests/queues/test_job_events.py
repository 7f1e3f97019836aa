"""Kubernetes Events: kubesim records them as the real components word them, and the job's
timeline (page and API) shows them beside its state changes."""

from datetime import timedelta

from django.urls import reverse
from django.utils import timezone

from fleet import kube
from fleet.models import Cluster
from kubesim.testing import wait_stepping
from queues.models import Job
from queues.services.jobs.apply import job_apply
from queues.services.jobs.events import job_events
from tests.queues.builders import submit, sync_until


def _events(sim, namespace):
    return {(e["reason"], e["involvedObject"]["kind"]): e
            for e in sim.kube.list("v1", "Event", namespace=namespace)}  # fmt: skip


def test_scheduling_admission_and_start_are_recorded_as_events(sim_jobs, api_as, client):
    job = submit(sim_jobs, name="eventful", gpus_per_worker=1, expected_runtime_seconds=60)
    assert job_apply(job_id=job.pk) == "applied"
    job = sync_until(job, Job.State.RUNNING)
    events = _events(sim_jobs["sim"], job.team.namespace)
    pod = job.pods.get().name
    assert events[("Scheduled", "Pod")]["message"].startswith(
        f"Successfully assigned {job.team.namespace}/{pod} to a100-node-"
    )
    assert events[("Scheduled", "Pod")]["source"]["component"] == "default-scheduler"
    assert events[("Started", "Pod")]["message"] == "Started container main"
    assert events[("Pulled", "Pod")]["message"] == (
        'Container image "ghcr.io/acme/train:1.0" already present on machine'
    )
    assert events[("QuotaReserved", "Workload")]["message"].startswith(
        "Quota reserved in ClusterQueue qm-vision, wait time since queued was "
    )
    body = api_as(sim_jobs["alice"]).get(reverse("api-job-detail", args=[job.pk])).json()
    assert {"Scheduled", "Started", "Admitted"} <= {e["reason"] for e in body["events"]}
    client.force_login(sim_jobs["alice"])
    page = client.get(reverse("job-detail", args=[job.pk])).content.decode()
    assert "Successfully assigned" in page and "Started container main" in page


def test_a_pod_that_fits_nowhere_has_a_failed_scheduling_warning(sim_jobs):
    sim = sim_jobs["sim"]
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "nowhere", "namespace": sim_jobs["vision"].namespace},
        "spec": {"nodeSelector": {"accelerator": "none"}, "containers": [
            {"name": "worker", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }  # fmt: skip
    sim.kube.apply(pod)
    found = wait_stepping(
        lambda: _events(sim, sim_jobs["vision"].namespace).get(("FailedScheduling", "Pod")),
        timeout=10,
        interval=0.2,
    )
    assert found["type"] == "Warning" and found["message"].startswith("0/5 nodes are available:")


def test_a_finished_jobs_events_are_kept_when_the_cluster_drops_them(sim_jobs, monkeypatch, client):
    from queues.services.jobs import events as job_events
    from queues.services.jobs.sync import jobs_sync_cluster

    monkeypatch.setattr(job_events, "KEEP_AFTER", job_events.timedelta(0))
    job = submit(sim_jobs, name="short", gpus_per_worker=1, expected_runtime_seconds=1)
    assert job_apply(job_id=job.pk) == "applied"
    job = sync_until(job, Job.State.SUCCEEDED)
    jobs_sync_cluster(cluster=job.cluster)  # the sync after it ended copies its events
    job.refresh_from_db()
    assert job.events_kept_at is not None
    kept = set(job.events.values_list("reason", flat=True))
    assert {"Scheduled", "Started", "QuotaReserved"} <= kept
    # The cluster forgets them (an hour later, or with the namespace): the timeline does not.
    sim = sim_jobs["sim"]
    for event in sim.kube.list("v1", "Event", namespace=job.team.namespace):
        sim.kube.delete("v1", "Event", event["metadata"]["name"], job.team.namespace)
    assert not sim.kube.list("v1", "Event", namespace=job.team.namespace)
    client.force_login(sim_jobs["alice"])
    page = client.get(reverse("job-detail", args=[job.pk])).content.decode()
    assert "Successfully assigned" in page and "Started container main" in page
    # Kept once: a later sync does not copy them again (nor empty them now they are gone).
    rows, stamp = job.events.count(), job.events_kept_at
    jobs_sync_cluster(cluster=job.cluster)
    job.refresh_from_db()
    assert job.events.count() == rows and job.events_kept_at == stamp


def test_events_are_not_asked_of_a_cluster_whose_breaker_is_open(sim_jobs, monkeypatch):
    job = submit(sim_jobs, name="quiet", gpus_per_worker=1)
    assert job_apply(job_id=job.pk) == "applied"
    job.refresh_from_db()
    now = timezone.now()
    Cluster.objects.filter(pk=job.cluster_id).update(
        unreachable_since=now, retry_at=now + timedelta(minutes=1)
    )
    job.cluster.refresh_from_db()
    asked = []
    monkeypatch.setattr(kube, "client_for", lambda cluster: asked.append(cluster) or None)
    assert job_events(job=job) == [] and asked == []
