"""Jobs of every kind through the portal on the real control plane: submitted through the
service (which queues the apply task after it commits), admitted by real Kueue, their pods bound
by the real scheduler to kwok nodes, and their end (success, failure, retries) read back by the
portal's status sync onto the job's row, its timeline and its page; a cancelled job's objects
leave the cluster; the cluster's events of a job reach its timeline."""

from __future__ import annotations

import pytest
from django.urls import reverse
from kubernetes import client as k8s

from cluster.testing import wait_for
from queues.models import Job, JobPod

S = Job.State


@pytest.fixture
def teams(portal):
    """Team a: 8 L4 GPUs and 16 A100 GPUs, reconciled."""
    portal.quota("a", "l4", 8)
    portal.quota("a", "a100", 16)
    portal.reconcile()
    return portal


def _timeline(job: Job) -> list[str]:
    return [t.to_state for t in job.transitions.order_by("at", "pk")]


def _page(client, portal, job, user="a") -> str:
    client.force_login(portal.users[user])
    response = client.get(reverse("job-detail", args=[job.pk]))
    assert response.status_code == 200
    return response.content.decode()


def test_a_batch_job_is_admitted_runs_on_a_kwok_node_and_succeeds(teams, client):
    job = teams.submit(name="first run", gpus_per_worker=2, run="3s")
    assert job.state == S.QUEUED, (job.state, job.pending_reason, job.apply_error)
    job = teams.sync_until(job, S.SUCCEEDED)
    assert _timeline(job)[-4:] == [S.QUEUED, S.ADMITTED, S.RUNNING, S.SUCCEEDED]
    assert job.admitted_pool == teams.pools["l4"]
    (pod,) = JobPod.objects.filter(job=job)
    assert pod.node_name.startswith("l4-node-")
    assert (pod.gpus, pod.phase, pod.exit_code) == (2, "Succeeded", 0)
    assert pod.started_at and pod.finished_at and pod.finished_at > pod.started_at
    # The cluster's events of the job (the Job controller, Kueue, the scheduler, kwok).
    from queues.services.jobs.events import job_events

    reasons = {e["reason"] for e in job_events(job=job)}
    assert {"Admitted", "Scheduled", "SuccessfulCreate", "Started"} <= reasons, reasons
    page = _page(client, teams, job)
    assert "Succeeded" in page and pod.node_name in page


def test_an_indexed_job_gives_each_worker_a_hostname_under_its_service(teams):
    job = teams.submit(name="ddp", workers=3, gpus_per_worker=1, run="4s")
    job = teams.sync_until(job, S.RUNNING, check=lambda j: j.pods.count() == 3)
    pods = sorted(teams.pods(job), key=lambda p: p.spec.hostname)
    assert [p.spec.hostname for p in pods] == [f"{job.k8s_name}-{i}" for i in range(3)]
    assert {p.spec.subdomain for p in pods} == {job.k8s_name}
    service = teams.core.read_namespaced_service(job.k8s_name, job.team.namespace)
    assert service.spec.cluster_ip == "None"
    env = {e.name: e for e in pods[2].spec.containers[0].env}
    assert env["MASTER_ADDR"].value == f"{job.k8s_name}-0.{job.k8s_name}"
    assert env["NODE_RANK"].value_from.field_ref.field_path.endswith("job-completion-index']")
    assert pods[2].metadata.annotations["batch.kubernetes.io/job-completion-index"] == "2"
    job = teams.sync_until(job, S.SUCCEEDED)
    assert job.pods.filter(phase="Succeeded").count() == 3


def test_a_failing_batch_job_is_run_again_up_to_its_retry_limit_then_fails(teams, client):
    job = teams.submit(name="crash", run="1s", exit_code=3, retry_limit=1)
    job = teams.sync_until(job, S.FAILED)
    assert job.retries == 1
    assert "exited with code 3" in job.exit_reason
    assert "run again 1 time" in job.exit_reason
    assert job.pods.filter(phase="Failed", exit_code=3).count() == 2
    reasons = [t.reason for t in job.transitions.all()]
    assert any("the cluster runs it again (retry 1 of 1)" in r for r in reasons), reasons
    assert "exited with code 3" in _page(client, teams, job)


def test_a_pytorchjob_runs_its_master_and_workers_to_success(teams):
    job = teams.submit(name="pt", kind="pytorchjob", workers=3, gpus_per_worker=2, run="3s")
    job = teams.sync_until(job, S.SUCCEEDED)
    names = set(job.pods.values_list("name", flat=True))
    assert names == {f"{job.k8s_name}-master-0", f"{job.k8s_name}-worker-0",
                     f"{job.k8s_name}-worker-1"}  # fmt: skip
    assert set(job.pods.values_list("gpus", flat=True)) == {2}
    assert S.ADMITTED in _timeline(job) and S.RUNNING in _timeline(job)


def _pod(portal, job, name_part):
    return next((p for p in portal.pods(job) if name_part in p.metadata.name), None)


def _annotate(portal, pod, value):
    portal.core.patch_namespaced_pod(
        pod.metadata.name, pod.metadata.namespace,
        {"metadata": {"annotations": {"qm.test/exit-code": value}}},
    )  # fmt: skip


def _restarts(pod) -> int:
    return sum(cs.restart_count for cs in pod.status.container_statuses or [])


def test_a_pytorchjob_replica_that_fails_once_is_restarted_and_the_job_succeeds(teams):
    """The training operator fails a PyTorchJob at the first failed replica unless its restart
    policy restarts it: a retry limit is a restart policy of OnFailure and a backoff limit that
    lets that many restarts run. (The master's end is the job's: it is the one that fails.)"""
    job = teams.submit(name="flaky", kind="pytorchjob", workers=2, run="8s", retry_limit=2)
    running = wait_for(
        lambda: (p := _pod(teams, job, "-master-0")) and p.status.phase == "Running" and p,
        what="the master to run",
    )
    _annotate(teams, running, "1")  # this run of the master fails ...
    wait_for(
        lambda: _restarts(_pod(teams, job, "-master-0")) >= 1, what="the master to be restarted"
    )
    _annotate(teams, running, None)  # ... and the next one succeeds
    job = teams.sync_until(job, S.SUCCEEDED, timeout=90)
    assert job.retries == 1
    reasons = [t.reason for t in job.transitions.all()]
    assert any("exit code 1" in r and "retry 1 of 2" in r for r in reasons), reasons
    restarted = job.pods.get(name=f"{job.k8s_name}-master-0")
    assert restarted.phase == "Succeeded"  # the same pod, restarted in place


def test_a_pytorchjob_that_keeps_failing_fails_after_its_retries(teams):
    job = teams.submit(name="broken", kind="pytorchjob", workers=1, run="2s", exit_code=2,
                       retry_limit=1)  # fmt: skip
    job = teams.sync_until(job, S.FAILED, timeout=90)
    assert job.retries == 1
    assert "run again 1 time, the job's retry limit" in job.exit_reason
    reasons = [t.reason for t in job.transitions.all()]
    assert any("exit code 2" in r and "retry 1 of 1" in r for r in reasons), reasons


def test_replicas_that_fail_together_count_one_failure_each(teams):
    """The operator adds up the restarts of all replicas: a master and a worker that fail at
    once use two failures of a retry limit of 1, and the job fails."""
    job = teams.submit(name="together", kind="pytorchjob", workers=2, run="2s", exit_code=2,
                       retry_limit=1)  # fmt: skip
    job = teams.sync_until(job, S.FAILED, timeout=90)
    assert "more times than its retry limit of 1 allows" in job.exit_reason or (
        job.retries == 1 and "run again 1 time" in job.exit_reason
    )


def test_a_pytorchjob_without_retries_fails_at_its_first_failure(teams):
    job = teams.submit(name="once", kind="pytorchjob", workers=2, run="2s", exit_code=5)
    job = teams.sync_until(job, S.FAILED, timeout=60)
    assert job.retries == 0
    # The operator stops the replicas still running once the job has failed (a sync later).
    teams.sync_until(
        job, S.FAILED, timeout=30,
        check=lambda j: not j.pods.filter(name__endswith="-master-0", phase="Running").exists(),
    )  # fmt: skip


def test_a_jobset_with_a_driver_runs_its_indexed_workers_and_completes(teams):
    job = teams.submit(name="set", kind="jobset", workers=2, gpus_per_worker=1, run="3s",
                       driver_command=["python", "driver.py"])  # fmt: skip
    job = teams.sync_until(job, S.RUNNING, check=lambda j: j.pods.count() == 3)
    workers = sorted((p for p in teams.pods(job) if "-workers-" in p.metadata.name),
                     key=lambda p: p.spec.hostname)  # fmt: skip
    # JobSet's webhook makes the child Jobs Indexed: each worker has a hostname.
    assert [p.spec.hostname for p in workers] == [f"{job.k8s_name}-workers-{i}-0" for i in (0, 1)]
    assert {p.spec.subdomain for p in workers} == {job.k8s_name}
    job = teams.sync_until(job, S.SUCCEEDED)
    gpus = dict(job.pods.values_list("name", "gpus"))
    assert sorted(g for n, g in gpus.items() if "-workers-" in n) == [1, 1]
    assert [g for n, g in gpus.items() if "-driver-" in n] == [0]


def test_a_jobset_whose_worker_fails_restarts_the_whole_set_within_its_retries(teams):
    job = teams.submit(name="again", kind="jobset", workers=2, run="5s", retry_limit=1)
    running = wait_for(
        lambda: (p := _pod(teams, job, "-workers-1-")) and p.status.phase == "Running" and p,
        what="the second worker to run",
    )
    _annotate(teams, running, "4")  # this attempt fails; the restarted set's pods are new
    job = teams.sync_until(job, S.SUCCEEDED, timeout=90)
    assert job.retries == 1
    assert job.pods.filter(exit_code=4).exists()


def test_a_jobset_whose_workers_keep_failing_fails_after_its_restarts(teams, client):
    """JobSet's failure policy restarts the whole set up to its maxRestarts (the retry
    limit); past it the JobSet fails, and the job with it, saying so with the exit code."""
    job = teams.submit(name="doomed", kind="jobset", workers=2, run="2s", exit_code=4,
                       retry_limit=1)  # fmt: skip
    job = teams.sync_until(job, S.FAILED, timeout=120)
    assert job.retries == 1
    assert "exited with code 4" in job.exit_reason
    assert job.exit_reason.endswith(
        "Its workers had been restarted together 1 time, the job's retry limit."
    )
    reasons = [t.reason for t in job.transitions.all()]
    assert any("the cluster runs it again (retry 1 of 1)" in r for r in reasons), reasons
    # Each attempt's workers: failed with the code the test chose, or stopped (Deleted) by the
    # restart a failed one set off.
    phases = list(job.pods.values_list("phase", "exit_code"))
    assert {p for p in phases if p[0] != "Deleted"} == {("Failed", 4)}, phases
    assert sum(p == ("Failed", 4) for p in phases) >= 2, phases
    assert "restarted together 1 time" in _page(client, teams, job)


def test_a_cancelled_job_leaves_the_cluster(teams):
    from queues.services.jobs.lifecycle import job_cancel

    job = teams.submit(name="stop me", workers=2, run="10m")
    job = teams.sync_until(job, S.RUNNING)
    with teams.committing():
        job_cancel(job=job, user=teams.users["a"])
    job.refresh_from_db()
    assert job.state == S.CANCELLED
    listed = k8s.BatchV1Api(teams.api).list_namespaced_job(job.team.namespace).items
    assert not [j for j in listed if j.metadata.name == job.k8s_name]
    wait_for(lambda: not teams.pods(job), what="the cancelled job's pods to go")
    teams.sync()
    assert not job.pods.filter(finished_at__isnull=True).exists()
