"""One cluster's trouble stays its own: the breaker, the apply lease, jobs told why they wait,
a missing namespace is a wait, killed workers' claims and objects, and a timeline that keeps
every state the cluster went through."""

import os
import socket
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from fleet import kube
from fleet.models import Cluster
from kubesim.testing import free_port
from queues.backends import backend_for
from queues.models import Job
from queues.services.jobs import apply as apply_service
from queues.services.jobs.apply import job_apply, jobs_apply_ready
from queues.services.jobs.sync import jobs_sync_all, jobs_sync_cluster
from tests.queues.builders import dead_pid, submit

S = Job.State


@pytest.fixture
def dead_cluster(tmp_path, db):
    """A cluster whose API server refuses connections (nothing listens on its port)."""
    path = tmp_path / "dead.kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: dead\n"
        f"clusters: [{{name: dead, cluster: {{server: 'http://127.0.0.1:{free_port()}'}}}}]\n"
        "contexts: [{name: dead, context: {cluster: dead, user: dead}}]\n"
        "users: [{name: dead, user: {token: x}}]\n"
    )
    kube.clear_client_cache()
    yield Cluster.objects.create(name="gpu-west", kubeconfig_path=str(path))
    kube.clear_client_cache()


def test_a_cluster_that_does_not_answer_opens_its_breaker_and_is_recorded(dead_cluster):
    client = kube.client_for(dead_cluster)
    with pytest.raises(kube.TransientError) as first:
        client.list("v1", "Namespace")
    assert not isinstance(first.value, kube.ClusterUnavailable)
    dead_cluster.refresh_from_db()
    assert dead_cluster.unreachable_since and dead_cluster.retry_at > timezone.now()
    assert "cannot reach the Kubernetes API" in dead_cluster.last_error
    # Until the next try, requests fail at once without going to the network, retries and all.
    started = time.monotonic()
    with pytest.raises(kube.ClusterUnavailable, match="gpu-west is not answering"):
        client.list("v1", "Namespace")
    assert time.monotonic() - started < 0.2


def test_an_answer_closes_the_breaker_and_records_contact_and_latency(sim_cluster):
    cluster = sim_cluster.cluster
    health = kube.client_for(cluster).health
    health.failed(kube.TransientError("refused", reason="Connection"), unreachable=True)
    with pytest.raises(kube.ClusterUnavailable):
        kube.client_for(cluster).list("v1", "Namespace")
    health.open_until = 0.0  # the window has passed: the next request tries
    kube.client_for(cluster).list("v1", "Namespace")
    cluster.refresh_from_db()
    assert cluster.unreachable_since is None and cluster.retry_at is None
    assert cluster.last_contact_at and cluster.api_latency_ms is not None


def test_jobs_for_an_unreachable_cluster_say_so_and_the_healthy_cluster_is_untouched(
    sim_jobs, dead_cluster
):
    healthy = submit(sim_jobs, name="healthy", gpus_per_worker=1)
    stuck = submit(sim_jobs, name="stuck", gpus_per_worker=1)
    Job.objects.filter(pk=stuck.pk).update(cluster=dead_cluster)
    with pytest.raises(kube.TransientError):
        jobs_apply_ready(cluster_id=dead_cluster.pk)
    # The breaker is open now: the next drain does not try, and tells the job why it waits.
    assert jobs_apply_ready(cluster_id=dead_cluster.pk) == {"waiting": 1}
    stuck.refresh_from_db()
    assert stuck.state == S.SUBMITTED
    assert stuck.pending_reason.startswith("Cluster gpu-west has not answered since ")
    assert "your job is applied when it answers" in stuck.pending_reason
    assert jobs_apply_ready(cluster_id=sim_jobs["cluster"].pk) == {"applied": 1}
    healthy.refresh_from_db()
    assert healthy.state == S.QUEUED and healthy.pending_reason == ""
    # The sync skips the dead cluster until its next try and syncs the healthy one.
    results = jobs_sync_all()
    assert results["gpu-west"] == {"skipped": "unreachable"}
    assert "error" not in results[sim_jobs["cluster"].name]


def test_a_failed_try_tells_the_waiting_jobs_the_error_the_attempt_and_the_next_one(sim_jobs):
    job = submit(sim_jobs, name="waits", gpus_per_worker=1)
    error = kube.TransientError("etcdserver: request timed out", status=500, reason="InternalError")
    next_at = timezone.now() + timedelta(seconds=7)
    apply_service.jobs_apply_retrying(error, 2, next_at, sim_jobs["cluster"].pk)
    job.refresh_from_db()
    assert "did not take the job yet (500 InternalError: etcdserver: request timed out)" in (
        job.pending_reason
    )
    assert f"retrying (attempt 3 at {timezone.localtime(next_at):%H:%M:%S})" in job.pending_reason
    assert "etcdserver" in job.apply_error
    apply_service.jobs_apply_retrying(error, 9, None, sim_jobs["cluster"].pk)
    job.refresh_from_db()
    assert job.pending_reason.endswith("retrying with the next sync, within a minute.")
    # Once applied, the reason is cleared.
    assert job_apply(job_id=job.pk) == "applied"
    job.refresh_from_db()
    assert job.state == S.QUEUED and job.pending_reason == ""


def test_one_worker_at_a_time_drains_a_cluster(sim_jobs, monkeypatch):
    cluster = sim_jobs["cluster"]
    job = submit(sim_jobs, name="second", gpus_per_worker=1)
    sent = []
    from queues import tasks

    monkeypatch.setattr(
        tasks.apply_jobs, "apply_async", lambda args, countdown=None: sent.append((args, countdown))
    )
    Cluster.objects.filter(pk=cluster.pk).update(
        apply_lease_until=timezone.now() + timedelta(seconds=60)
    )
    assert jobs_apply_ready(cluster_id=cluster.pk) == {"busy": 1}
    assert sent == [((cluster.pk,), apply_service.LEASE_BUSY_RETRY_SECONDS)]
    assert Job.objects.get(pk=job.pk).state == S.SUBMITTED
    # A lease whose holder died runs out; then the next drain takes it and gives it back.
    Cluster.objects.filter(pk=cluster.pk).update(
        apply_lease_until=timezone.now() - timedelta(seconds=1)
    )
    assert jobs_apply_ready(cluster_id=cluster.pk) == {"applied": 1}
    assert Cluster.objects.get(pk=cluster.pk).apply_lease_until is None


def test_a_drain_cut_off_takes_back_its_lease_and_claims_when_it_runs_again(sim_jobs, monkeypatch):
    """A drain cut off by the database going away could not give back its lease or its claims;
    its retry (the same run, maybe in another process) takes them back at once, where any other
    run finds the cluster busy until they expire (90 s and 2 min)."""
    from queues import tasks

    cluster = sim_jobs["cluster"]
    jobs = [submit(sim_jobs, name=f"cut {i}", gpus_per_worker=1) for i in range(2)]
    monkeypatch.setattr(tasks.apply_jobs, "apply_async", lambda *a, **kw: None)
    # Held by a live process of this host (pid 1 never ends) in run "run-1".
    earlier = f"{apply_service.this_host_prefix()}1/run-1"
    Cluster.objects.filter(pk=cluster.pk).update(
        apply_lease_until=timezone.now() + apply_service.APPLY_LEASE, apply_lease_by=earlier
    )
    Job.objects.filter(pk__in=[j.pk for j in jobs]).update(
        apply_claimed_at=timezone.now(), apply_claimed_by=earlier
    )
    assert jobs_apply_ready(cluster_id=cluster.pk, run="run-2") == {"busy": 1}
    assert jobs_apply_ready(cluster_id=cluster.pk, run="run-1") == {"applied": 2}
    assert set(Job.objects.filter(pk__in=[j.pk for j in jobs]).values_list("state", flat=True)) == {
        S.QUEUED
    }
    row = Cluster.objects.get(pk=cluster.pk)
    assert row.apply_lease_until is None and row.apply_lease_by == ""


def test_the_lease_of_a_worker_process_that_is_gone_is_free(sim_jobs, monkeypatch):
    cluster = sim_jobs["cluster"]
    job = submit(sim_jobs, name="orphan", gpus_per_worker=1)
    Cluster.objects.filter(pk=cluster.pk).update(
        apply_lease_until=timezone.now() + apply_service.APPLY_LEASE,
        apply_lease_by=f"{apply_service.this_host_prefix()}{dead_pid()}/run-9",
    )
    assert jobs_apply_ready(cluster_id=cluster.pk, run="run-10") == {"applied": 1}
    assert Job.objects.get(pk=job.pk).state == S.QUEUED


def test_a_disabled_cluster_gets_nothing_and_its_jobs_say_why(sim_jobs):
    cluster = sim_jobs["cluster"]
    job = submit(sim_jobs, name="later", gpus_per_worker=1)
    Cluster.objects.filter(pk=cluster.pk).update(enabled=False, disabled_reason="maintenance")
    assert jobs_apply_ready(cluster_id=cluster.pk) == {"waiting": 1}
    job.refresh_from_db()
    assert job.state == S.SUBMITTED
    assert job.pending_reason == (
        f"Cluster {cluster.name} is disabled by the platform admins (maintenance); "
        "your job is sent to it when it is enabled again."
    )
    assert sim_jobs["sim"].kube.list("batch/v1", "Job", namespace=job.team.namespace) == []


def test_a_missing_namespace_is_a_wait_and_the_reconciler_sends_the_job_when_it_exists(
    sim_jobs, monkeypatch
):
    from queues import tasks

    job = submit(sim_jobs, name="early", gpus_per_worker=1)
    sim_jobs["sim"].kube.delete("v1", "Namespace", job.team.namespace)
    reconciles, requests = [], []
    monkeypatch.setattr(tasks.reconcile_cluster, "delay", lambda pk: reconciles.append(pk))
    outcome = jobs_apply_ready(cluster_id=sim_jobs["cluster"].pk)
    assert outcome == {"waiting for namespace": 1}
    job.refresh_from_db()
    assert job.state == S.SUBMITTED and job.exit_reason == ""
    assert job.pending_reason.startswith(f"Waiting for namespace {job.team.namespace}")
    assert reconciles == [sim_jobs["cluster"].pk]
    # The reconciler recreates the namespace, then asks for the waiting jobs to be applied.
    monkeypatch.setattr(
        apply_service, "jobs_apply_request", lambda cluster_id: requests.append(cluster_id)
    )
    from queues.models import ManagedObject

    ManagedObject.objects.filter(kind="Namespace", name=job.team.namespace).update(
        applied_generation=0
    )
    tasks.reconcile_cluster.apply(args=[sim_jobs["cluster"].pk])
    assert requests == [sim_jobs["cluster"].pk]
    assert job_apply(job_id=job.pk) == "applied"


def test_a_new_worker_process_releases_the_claims_of_dead_processes_on_its_host(sim_jobs):
    mine = submit(sim_jobs, name="claimed by a dead process", gpus_per_worker=1)
    alive = submit(sim_jobs, name="claimed by a live one", gpus_per_worker=1)
    elsewhere = submit(sim_jobs, name="claimed on another host", gpus_per_worker=1)
    dead = dead_pid()
    host = socket.gethostname()
    now = timezone.now()
    Job.objects.filter(pk=mine.pk).update(apply_claimed_at=now, apply_claimed_by=f"{host}:{dead}")
    Job.objects.filter(pk=alive.pk).update(
        apply_claimed_at=now, apply_claimed_by=f"{host}:{os.getpid()}"
    )
    Job.objects.filter(pk=elsewhere.pk).update(apply_claimed_at=now, apply_claimed_by="other:1")
    assert apply_service.claims_release_dead() == 1
    assert Job.objects.get(pk=mine.pk).apply_claimed_at is None
    assert Job.objects.get(pk=alive.pk).apply_claimed_at is not None
    assert Job.objects.get(pk=elsewhere.pk).apply_claimed_at is not None
    assert jobs_apply_ready(cluster_id=sim_jobs["cluster"].pk) == {"applied": 1}


def test_objects_a_killed_worker_created_are_adopted_completely(sim_jobs):
    sim = sim_jobs["sim"]
    job = submit(sim_jobs, name="half done", gpus_per_worker=1)
    # The worker created the objects, then died before recording them (its claim stays).
    Job.objects.filter(pk=job.pk).update(apply_claimed_at=timezone.now(), apply_claimed_by="gone:1")
    job = Job.objects.select_related("team", "tier", "pool", "cluster").get(pk=job.pk)
    for obj in backend_for(job.cluster).job_objects(job):
        kube.client_for(job.cluster).apply(obj)
    jobs_sync_cluster(cluster=job.cluster)
    job.refresh_from_db()
    (live,) = sim.kube.list("batch/v1", "Job", namespace=job.team.namespace)
    assert job.state in (S.QUEUED, S.ADMITTED, S.RUNNING)
    assert job.applied_generation == job.desired_generation
    assert job.k8s_uid == live["metadata"]["uid"]
    assert job.apply_claimed_at is None and job.apply_claimed_by == ""
    # Adopted, it is watched like any other: objects deleted outside the portal mean lost.
    sim.kube.delete("batch/v1", "Job", job.k8s_name, job.team.namespace)
    Job.objects.filter(pk=job.pk).update(submitted_at=timezone.now() - timedelta(minutes=5))
    jobs_sync_cluster(cluster=job.cluster)
    job.refresh_from_db()
    assert job.state == S.FAILED and "disappeared from the cluster" in job.exit_reason


def test_a_job_seen_only_after_it_finished_keeps_every_state_at_the_clusters_times(sim_jobs):
    sim = sim_jobs["sim"]
    job = submit(sim_jobs, name="quick", gpus_per_worker=1, expected_runtime_seconds=1)
    assert job_apply(job_id=job.pk) == "applied"
    job.refresh_from_db()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:  # no sync meanwhile: the portal sees it queued
        live = sim.kube.get("batch/v1", "Job", job.k8s_name, job.team.namespace)
        if any(c["type"] == "Complete" for c in (live.get("status") or {}).get("conditions", [])):
            break
        time.sleep(0.1)
    assert Job.objects.get(pk=job.pk).state == S.QUEUED
    jobs_sync_cluster(cluster=job.cluster)
    job.refresh_from_db()
    transitions = list(job.transitions.order_by("at", "pk"))
    assert [t.to_state for t in transitions] == [
        "submitted", "queued", "admitted", "running", "succeeded"
    ]  # fmt: skip
    assert [t.at for t in transitions] == sorted(t.at for t in transitions)
    assert job.admitted_at and job.started_at and job.finished_at
    assert job.admitted_at <= job.started_at <= job.finished_at
    assert job.pending_reason == ""


def test_the_job_page_and_the_dashboard_say_a_cluster_is_unreachable(sim_jobs, client):
    cluster = sim_jobs["cluster"]
    job = submit(sim_jobs, name="waiting", gpus_per_worker=1)
    since = timezone.now() - timedelta(minutes=3)
    Cluster.objects.filter(pk=cluster.pk).update(
        unreachable_since=since,
        retry_at=timezone.now() + timedelta(seconds=40),
        last_error="cannot reach the Kubernetes API at https://10.0.0.1: timed out",
    )
    client.force_login(sim_jobs["alice"])
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    local = timezone.localtime(since)
    assert f"Cluster {cluster.name} has not answered since {local:%H:%M}" in page
    assert "your job is applied when it answers" in page
    board = client.get("/dashboard/").content.decode()
    assert f'data-testid="cluster-{cluster.name}"' in board and "unreachable" in board
    assert "10.0.0.1" not in board  # errors (internal addresses) are for platform admins
    client.force_login(sim_jobs["admin"])
    assert "10.0.0.1" in client.get("/dashboard/").content.decode()


def test_a_claimed_job_says_a_worker_is_creating_it_and_when_another_takes_over(sim_jobs, client):
    job = submit(sim_jobs, name="claimed", gpus_per_worker=1)
    claimed = timezone.now()
    Job.objects.filter(pk=job.pk).update(apply_claimed_at=claimed, apply_claimed_by="w:1")
    client.force_login(sim_jobs["alice"])
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    takeover = timezone.localtime(claimed + apply_service.APPLY_CLAIM_TTL)
    assert "A worker has been creating it in cluster" in page
    assert f"another takes it over by {takeover:%H:%M:%S}" in page


def test_one_worker_tries_an_unreachable_cluster_again_when_its_window_has_run_out(sim_jobs):
    from fleet.services.cluster_health import cluster_may_call

    cluster = sim_jobs["cluster"]
    now = timezone.now()
    Cluster.objects.filter(pk=cluster.pk).update(
        unreachable_since=now - timedelta(minutes=1), retry_at=now + timedelta(seconds=20)
    )
    cluster.refresh_from_db()
    assert not cluster_may_call(cluster=cluster)  # the window is open: leave it alone
    Cluster.objects.filter(pk=cluster.pk).update(retry_at=now - timedelta(seconds=1))
    cluster.refresh_from_db()
    stale = Cluster.objects.get(pk=cluster.pk)
    # The first worker wins the try and probes; kubesim answers, so the breaker closes.
    assert cluster_may_call(cluster=cluster)
    fresh = Cluster.objects.get(pk=cluster.pk)
    assert fresh.unreachable_since is None and fresh.retry_at is None
    # Another worker that read the row before cannot win the same try.
    assert not cluster_may_call(cluster=stale)


def test_a_probe_that_finds_the_cluster_still_dark_keeps_it_closed(dead_cluster):
    from fleet.services.cluster_health import cluster_may_call

    now = timezone.now()
    Cluster.objects.filter(pk=dead_cluster.pk).update(
        unreachable_since=now - timedelta(minutes=2), retry_at=now - timedelta(seconds=1)
    )
    dead_cluster.refresh_from_db()
    assert not cluster_may_call(cluster=dead_cluster)
    dead_cluster.refresh_from_db()
    # Down for two minutes: the next try is about a minute away (half the time it has been down).
    wait = (dead_cluster.retry_at - timezone.now()).total_seconds()
    assert 50 <= wait <= 65
