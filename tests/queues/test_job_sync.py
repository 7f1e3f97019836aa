"""Apply and status sync against kubesim: lifecycle, pods, preemption, why-pending, idempotency."""

import pytest
from django.utils import timezone

from fleet import kube
from fleet.models import Cluster
from queues.manifests import quotas as manifests
from queues.models import Job, JobPod
from queues.services.jobs import apply as apply_service
from queues.services.jobs.apply import job_apply
from queues.services.jobs.lifecycle import job_cancel
from queues.services.jobs.sync import jobs_sync_cluster
from tests.queues.builders import run_tasks_eagerly, submit, sync_until


@pytest.fixture
def eager_tasks(monkeypatch):
    run_tasks_eagerly(monkeypatch)


def _cluster_jobs(sim, job):
    return sim.kube.list(
        "batch/v1",
        "Job",
        namespace=job.team.namespace,
        label_selector=f"quartermaster.dev/job-id={job.pk}",
    )


def test_short_job_goes_queued_admitted_running_succeeded_with_pods(sim_jobs):
    job = submit(sim_jobs, workers=2, gpus_per_worker=2, expected_runtime_seconds=1)
    assert job.state == Job.State.SUBMITTED
    assert job_apply(job_id=job.pk) == "applied"
    job.refresh_from_db()
    assert job.state == Job.State.QUEUED and job.k8s_uid
    job = sync_until(job, Job.State.RUNNING)
    assert job.state == Job.State.RUNNING
    assert job.admitted_pool == sim_jobs["pools"]["a100"]
    job = sync_until(job, Job.State.SUCCEEDED)
    assert job.state == Job.State.SUCCEEDED
    states = list(job.transitions.values_list("to_state", flat=True))
    assert states == ["submitted", "queued", "admitted", "running", "succeeded"]
    assert job.queued_at <= job.admitted_at <= job.started_at <= job.finished_at
    pods = list(JobPod.objects.filter(job=job))
    assert len(pods) == 2
    for pod in pods:
        assert pod.node_name.startswith("a100")
        # GPU UUIDs are not part of a pod: billing learns them from the DCGM series.
        assert pod.gpus == 2 and pod.gpu_uuids == []
        assert pod.phase == "Succeeded" and pod.exit_code == 0
        assert pod.started_at and pod.finished_at and pod.finished_at >= pod.started_at


def test_apply_is_idempotent_across_retries_and_crashes(sim_jobs):
    sim = sim_jobs["sim"]
    job = submit(sim_jobs)
    assert job_apply(job_id=job.pk) == "applied"
    assert job_apply(job_id=job.pk) == "skipped (queued)"
    # A worker that died after creating the object but before recording it runs again.
    Job.objects.filter(pk=job.pk).update(state="submitted", applied_generation=0)
    assert job_apply(job_id=job.pk) == "applied"
    (obj,) = _cluster_jobs(sim, job)
    assert obj["metadata"]["uid"] == Job.objects.get(pk=job.pk).k8s_uid


def test_apply_reads_the_job_in_one_query_and_records_it_in_one_transaction(
    sim_jobs, django_assert_num_queries
):
    for workers in (1, 2):  # a Job alone, and an Indexed Job with its headless Service
        job = submit(sim_jobs, workers=workers, gpus_per_worker=1)
        # The job with what rendering needs; the team's image pull secrets; then, in a
        # transaction (a savepoint in tests), lock its state, update it and record the
        # transition.
        with django_assert_num_queries(7):
            assert job_apply(job_id=job.pk) == "applied"
        (obj,) = _cluster_jobs(sim_jobs["sim"], job)
        assert obj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == job.team.slug
        assert obj["spec"]["template"]["spec"]["nodeSelector"] == {
            "accelerator": "nvidia-a100-80gb"
        }


def test_a_drain_applies_every_submitted_job_of_the_cluster_in_batches(
    sim_jobs, monkeypatch, django_assert_num_queries
):
    monkeypatch.setattr(apply_service, "APPLY_BATCH", 3)
    cluster = sim_jobs["cluster"]
    jobs = [submit(sim_jobs, name=f"sweep {i}", gpus_per_worker=1) for i in range(5)]
    held = submit(sim_jobs, name="applied already", gpus_per_worker=1)
    assert job_apply(job_id=held.pk) == "applied"
    Cluster.objects.filter(pk=cluster.pk).update(jobs_apply_requested_at=timezone.now())
    # Read the cluster, take its apply lease, clear the request, then two batches (3, then 2:
    # fewer than a batch, so the last) with the lease renewed between them, and the lease given
    # back. A batch is a claim (a transaction reading and marking its jobs), its teams' image
    # pull secrets, and one transaction recording them (their states locked, an update per
    # job, one insert of transitions): 3 + 2 × 9 + 3 + 2 + 1 + 1.
    with django_assert_num_queries(28):
        assert apply_service.jobs_apply_ready(cluster_id=cluster.pk) == {"applied": 5}
    assert Cluster.objects.get(pk=cluster.pk).jobs_apply_requested_at is None
    for job in jobs:
        job.refresh_from_db()
        assert job.state == Job.State.QUEUED and job.k8s_uid and job.apply_claimed_at is None
        assert list(job.transitions.values_list("to_state", flat=True)) == [
            "submitted", "queued"
        ]  # fmt: skip
        (obj,) = _cluster_jobs(sim_jobs["sim"], job)
        assert obj["metadata"]["uid"] == job.k8s_uid
    assert apply_service.jobs_apply_ready(cluster_id=cluster.pk) == {}


def test_a_drain_leaves_jobs_another_worker_claimed_and_takes_over_stale_claims(sim_jobs):
    cluster = sim_jobs["cluster"]
    theirs = submit(sim_jobs, name="theirs", gpus_per_worker=1)
    abandoned = submit(sim_jobs, name="abandoned", gpus_per_worker=1)
    Job.objects.filter(pk=theirs.pk).update(apply_claimed_at=timezone.now())
    long_ago = timezone.now() - apply_service.APPLY_CLAIM_TTL * 2
    Job.objects.filter(pk=abandoned.pk).update(apply_claimed_at=long_ago)
    assert apply_service.jobs_apply_ready(cluster_id=cluster.pk) == {"applied": 1}
    assert Job.objects.get(pk=theirs.pk).state == Job.State.SUBMITTED
    assert Job.objects.get(pk=abandoned.pk).state == Job.State.QUEUED
    assert _cluster_jobs(sim_jobs["sim"], theirs) == []


def test_a_transient_error_records_what_was_applied_and_gives_the_rest_back(sim_jobs, monkeypatch):
    cluster = sim_jobs["cluster"]
    first, second, third = (submit(sim_jobs, name=n, gpus_per_worker=1) for n in "abc")
    client = kube.client_for(cluster)
    real_apply = client.apply

    def fail_on_second(manifest, **kwargs):
        if manifest["metadata"]["labels"]["quartermaster.dev/job-id"] == str(second.pk):
            raise kube.TransientError("connection reset", status=503, reason="Unavailable")
        return real_apply(manifest, **kwargs)

    monkeypatch.setattr(client, "apply", fail_on_second)
    with pytest.raises(kube.TransientError):
        apply_service.jobs_apply_ready(cluster_id=cluster.pk)
    states = dict(Job.objects.values_list("pk", "state"))
    assert states == {first.pk: "queued", second.pk: "submitted", third.pk: "submitted"}
    # Given back: the retry (or another worker) takes them at once.
    assert not Job.objects.filter(apply_claimed_at__isnull=False).exists()
    monkeypatch.setattr(client, "apply", real_apply)
    assert apply_service.jobs_apply_ready(cluster_id=cluster.pk) == {"applied": 2}


def test_a_job_cancelled_while_it_was_applied_has_its_objects_deleted(sim_jobs, monkeypatch):
    job = submit(sim_jobs, gpus_per_worker=1)
    client = kube.client_for(sim_jobs["cluster"])
    real_apply = client.apply

    def apply_then_cancel(manifest, **kwargs):
        stored = real_apply(manifest, **kwargs)
        job_cancel(job=job, user=sim_jobs["alice"])
        return stored

    monkeypatch.setattr(client, "apply", apply_then_cancel)
    assert job_apply(job_id=job.pk) == "applied, then deleted (cancelled meanwhile)"
    assert Job.objects.get(pk=job.pk).state == Job.State.CANCELLED
    assert _cluster_jobs(sim_jobs["sim"], job) == []


def test_a_job_recorded_by_another_worker_meanwhile_gets_this_applys_bookkeeping(
    sim_jobs, monkeypatch
):
    job = submit(sim_jobs, gpus_per_worker=1)
    client = kube.client_for(sim_jobs["cluster"])
    real_apply = client.apply

    def apply_while_another_records(manifest, **kwargs):
        stored = real_apply(manifest, **kwargs)
        Job.objects.filter(pk=job.pk).update(state=Job.State.QUEUED, k8s_uid="")
        return stored

    monkeypatch.setattr(client, "apply", apply_while_another_records)
    assert job_apply(job_id=job.pk) == "applied"
    job.refresh_from_db()
    (obj,) = _cluster_jobs(sim_jobs["sim"], job)
    assert job.state == Job.State.QUEUED and job.k8s_uid == obj["metadata"]["uid"]
    assert job.applied_generation == job.desired_generation and job.workload_name
    assert not job.transitions.filter(to_state=Job.State.QUEUED).exists()  # not recorded twice


def test_transient_errors_propagate_for_retry_and_permanent_errors_fail_the_job(
    sim_jobs, monkeypatch
):
    job = submit(sim_jobs)
    client = kube.client_for(job.cluster)

    def flaky(manifest, **kwargs):
        raise kube.TransientError("connection reset", status=503, reason="ServiceUnavailable")

    monkeypatch.setattr(client, "apply", flaky)
    try:
        job_apply(job_id=job.pk)
        raise AssertionError("expected TransientError")
    except kube.TransientError:
        pass
    job.refresh_from_db()
    assert job.state == Job.State.SUBMITTED

    def refuse(manifest, **kwargs):
        raise kube.PermanentError("Job is invalid", status=422, reason="Invalid")

    monkeypatch.setattr(client, "apply", refuse)
    assert job_apply(job_id=job.pk) == "failed"
    job.refresh_from_db()
    assert job.state == Job.State.FAILED
    assert "Job is invalid" in job.apply_error


def test_preemption_by_a_higher_tier_records_who_and_why(sim_jobs):
    low = submit(sim_jobs, name="low", gpus_per_worker=8, tier="development")
    job_apply(job_id=low.pk)
    low = sync_until(low, Job.State.RUNNING)
    assert low.state == Job.State.RUNNING
    # Fill the borrowing room too, so the production job has to take the low job's GPUs.
    high = submit(sim_jobs, name="urgent", user="bob", gpus_per_worker=8, tier="production")
    job_apply(job_id=high.pk)
    low = sync_until(low, Job.State.PREEMPTED)
    assert low.state == Job.State.PREEMPTED
    assert "urgent" in low.preemption_reason
    assert "production" in low.preemption_reason
    assert "higher-priority job of your own team" in low.preemption_reason
    high = sync_until(high, Job.State.RUNNING)
    assert high.state == Job.State.RUNNING


def test_over_quota_job_says_why_and_where_in_the_queue(sim_jobs):
    running = submit(sim_jobs, name="big", gpus_per_worker=8, expected_runtime_seconds=900)
    job_apply(job_id=running.pk)
    running = sync_until(running, Job.State.RUNNING)
    first = submit(sim_jobs, name="next", gpus_per_worker=8, workers=1)
    second = submit(sim_jobs, name="after", gpus_per_worker=8, workers=1)
    job_apply(job_id=first.pk)
    job_apply(job_id=second.pk)
    jobs_sync_cluster(cluster=first.cluster)
    jobs_sync_cluster(cluster=first.cluster)
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.state == second.state == Job.State.QUEUED
    assert (first.queue_position, second.queue_position) == (1, 2)
    assert first.pending_reason.startswith("Waiting for 8 A100-SXM4-80GB GPUs")
    assert "your team's quota is 8 (8 in use)" in first.pending_reason
    assert "the department has 4 idle to lend" in first.pending_reason
    assert "Only 4 of the 8 it needs are free now" in first.pending_reason
    # The running job is expected to end 900 s after it started; then 8 GPUs are free.
    assert first.estimated_start is not None
    delta = (first.estimated_start - running.started_at).total_seconds()
    assert 899 <= delta <= 901
    assert "expected" in first.estimate_basis


def test_a_sync_of_unchanged_jobs_reads_as_much_and_writes_nothing_however_many_wait(sim_jobs):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    running = submit(sim_jobs, name="big", gpus_per_worker=8, expected_runtime_seconds=900)
    job_apply(job_id=running.pk)
    running = sync_until(running, Job.State.RUNNING)

    def queue_more(count):
        for i in range(count):
            job = submit(sim_jobs, name=f"wait {i}", gpus_per_worker=8)
            job_apply(job_id=job.pk)
        jobs_sync_cluster(cluster=running.cluster)  # positions, reasons and estimates
        jobs_sync_cluster(cluster=running.cluster)
        with CaptureQueriesContext(connection) as ctx:
            jobs_sync_cluster(cluster=running.cluster)
        sql = [q["sql"] for q in ctx.captured_queries]
        assert not [q for q in sql if q.startswith(("UPDATE", "INSERT", "DELETE"))], sql
        return len(sql)

    assert queue_more(2) == queue_more(4)
    waiting = list(Job.objects.filter(state=Job.State.QUEUED).order_by("queue_position"))
    assert [j.queue_position for j in waiting] == [1, 2, 3, 4, 5, 6]
    # Ceiling 12 (8 quota + 4 to borrow), 8 in use: the first fits when the running job ends;
    # the second also needs the first's 8 GPUs, 16 in all, which never fit.
    delta = (waiting[0].estimated_start - running.started_at).total_seconds()
    assert 899 <= delta <= 901
    assert waiting[1].estimated_start is None
    assert "16 GPUs do not fit in your team's ceiling of 12" in waiting[1].estimate_basis


def test_cancel_deletes_cluster_objects_and_keeps_the_record(
    sim_jobs, eager_tasks, django_capture_on_commit_callbacks
):
    sim = sim_jobs["sim"]
    with django_capture_on_commit_callbacks(execute=True):
        job = submit(sim_jobs)
    job.refresh_from_db()
    assert job.state == Job.State.QUEUED
    assert len(_cluster_jobs(sim, job)) == 1
    with django_capture_on_commit_callbacks(execute=True):
        job_cancel(job=job, user=sim_jobs["alice"])
    job.refresh_from_db()
    assert job.state == Job.State.CANCELLED and job.finished_at
    assert _cluster_jobs(sim, job) == []
    # The sync leaves the cancelled job alone.
    jobs_sync_cluster(cluster=job.cluster)
    job.refresh_from_db()
    assert job.state == Job.State.CANCELLED


def test_volcano_cluster_runs_a_gang_job_through_to_success(sim_jobs):
    cluster = sim_jobs["cluster"]
    cluster.scheduler = "volcano"
    cluster.save()
    from queues.services.reconcile import cluster_reconcile

    cluster_reconcile(cluster_id=cluster.pk)
    job = submit(sim_jobs, workers=2, gpus_per_worker=2, expected_runtime_seconds=1)
    assert job_apply(job_id=job.pk) == "applied"
    vcjob = sim_jobs["sim"].kube.get(
        "batch.volcano.sh/v1alpha1", "Job", job.k8s_name, job.team.namespace
    )
    assert vcjob["spec"]["minAvailable"] == 2
    job = sync_until(job, Job.State.SUCCEEDED)
    assert job.state == Job.State.SUCCEEDED
    assert list(job.transitions.values_list("to_state", flat=True))[-3:] == [
        "admitted",
        "running",
        "succeeded",
    ]
    assert JobPod.objects.filter(job=job, phase="Succeeded").count() == 2


def test_a_volcano_job_that_waits_says_why_with_its_queue_position(sim_jobs):
    cluster = sim_jobs["cluster"]
    cluster.scheduler = "volcano"
    cluster.save()
    from queues.services.reconcile import cluster_reconcile

    cluster_reconcile(cluster_id=cluster.pk)
    running = submit(sim_jobs, name="big", workers=2, gpus_per_worker=6)
    job_apply(job_id=running.pk)
    assert sync_until(running, Job.State.RUNNING).state == Job.State.RUNNING
    waiting = submit(sim_jobs, name="next", workers=2, gpus_per_worker=6)
    job_apply(job_id=waiting.pk)
    jobs_sync_cluster(cluster=cluster)
    waiting.refresh_from_db()
    assert waiting.state == Job.State.QUEUED
    assert waiting.pending_reason.startswith("Waiting for 12 A100-SXM4-80GB GPUs")
    assert "your team's quota is 8 (12 in use)" in waiting.pending_reason
    # Volcano shows no position: the portal works it out from the queue's PodGroups, and the
    # start from the running job's expected end (600 s after it started).
    assert waiting.queue_position == 1
    running.refresh_from_db()
    assert waiting.estimated_start is not None
    assert abs((waiting.estimated_start - running.started_at).total_seconds() - 600) <= 1


def test_volcano_enforces_each_pools_quota_not_just_the_teams_sum(sim_jobs):
    """vision may hold 4 L4 GPUs (and 12 A100): a second 3-GPU L4 job waits in the pool's leaf
    Queue although the team's Queue (16 in all) has room."""
    cluster = sim_jobs["cluster"]
    cluster.scheduler = "volcano"
    cluster.save()
    from queues.services.reconcile import cluster_reconcile

    cluster_reconcile(cluster_id=cluster.pk)
    first = submit(
        sim_jobs, name="l4 one", pool="l4", gpus_per_worker=3, expected_runtime_seconds=60
    )
    job_apply(job_id=first.pk)
    assert sync_until(first, Job.State.RUNNING).state == Job.State.RUNNING
    second = submit(sim_jobs, name="l4 two", pool="l4", gpus_per_worker=3)
    job_apply(job_id=second.pk)
    for _ in range(3):
        jobs_sync_cluster(cluster=cluster)
    second.refresh_from_db()
    assert second.state == Job.State.QUEUED
    vcjob = sim_jobs["sim"].kube.get(
        "batch.volcano.sh/v1alpha1", "Job", second.k8s_name, second.team.namespace
    )
    leaf = manifests.volcano_pool_queue_name(second.team, second.pool)
    assert vcjob["spec"]["queue"] == leaf
    podgroups = sim_jobs["sim"].kube.list("scheduling.volcano.sh/v1beta1", "PodGroup")
    (pg,) = [p for p in podgroups if p["metadata"]["name"].startswith(second.k8s_name)]
    reasons = " ".join(c.get("message", "") for c in pg["status"].get("conditions") or [])
    assert f"queue {leaf} nvidia.com/gpu capability 4" in reasons
    # A job for "any pool" waits in one pool's queue: the one with room for it.
    anywhere = submit(sim_jobs, name="anywhere", pool="any", gpus_per_worker=3)
    assert anywhere.pool == sim_jobs["pools"]["a100"]


def test_one_list_per_kind_per_sync_however_many_jobs(sim_jobs, monkeypatch):
    client = kube.client_for(sim_jobs["cluster"])
    calls = []
    for verb in ("list", "raw_get", "get"):
        real = getattr(client, verb)

        def counted(*args, _real=real, _verb=verb, **kwargs):
            calls.append(_verb)
            return _real(*args, **kwargs)

        monkeypatch.setattr(client, verb, counted)
    jobs = [submit(sim_jobs, name=f"j{i}", gpus_per_worker=8) for i in range(4)]
    for job in jobs:
        job_apply(job_id=job.pk)
    calls.clear()
    jobs_sync_cluster(cluster=sim_jobs["cluster"])
    # Jobs, Workloads, Pods, and the visibility API once for the team's ClusterQueue.
    assert sorted(calls) == ["list", "list", "list", "raw_get"]


def test_failed_worker_records_the_exit_reason(sim_jobs, monkeypatch):
    from queues.manifests import jobs as job_manifests

    real = job_manifests._pod_metadata

    def failing(job):
        meta = real(job)
        meta["annotations"]["kubesim.dev/exit-code"] = "3"
        return meta

    monkeypatch.setattr(job_manifests, "_pod_metadata", failing)
    job = submit(sim_jobs, expected_runtime_seconds=1)
    job_apply(job_id=job.pk)
    job = sync_until(job, Job.State.FAILED)
    assert job.state == Job.State.FAILED
    assert "exited with code 3" in job.exit_reason
    assert JobPod.objects.get(job=job).exit_code == 3


def test_job_over_its_maximum_runtime_fails_with_that_reason(sim_jobs, monkeypatch):
    from queues.manifests import jobs as job_manifests

    real = job_manifests._pod_metadata

    def slow(job):
        meta = real(job)
        meta["annotations"]["kubesim.dev/duration-seconds"] = "30"
        return meta

    monkeypatch.setattr(job_manifests, "_pod_metadata", slow)
    job = submit(sim_jobs, max_runtime_seconds=1, expected_runtime_seconds=None)
    job_apply(job_id=job.pk)
    job = sync_until(job, Job.State.FAILED)
    assert job.state == Job.State.FAILED
    assert job.exit_reason == "Stopped after its maximum runtime of 1 s."


def test_the_preemptor_is_named_from_kueues_eviction_message(jw):
    """Kueue names the preemptor by its Workload's and job's UIDs and its ClusterQueue's cohort
    path (v0.19's message, word for word apart from the UIDs): the portal finds the job by its
    UID, and names the ClusterQueue when the preemptor is no job of the portal's."""
    from queues.backends.kueue import _preemption_text

    victim = submit(jw, name="sweep", gpus_per_worker=1)
    preemptor = submit(jw, name="launch", gpus_per_worker=1, tier="production")
    preemptor.k8s_uid = "2b1af280-3831-47c4-b241-51f585b88c4d"
    preemptor.save()
    message = (
        "Preempted to accommodate a workload (UID: 5d6ae9fb-26b1-4023-8973-f5801c79d672, "
        f"JobUID: {preemptor.k8s_uid}) due to prioritization in the ClusterQueue; preemptor "
        "path: /qm-research/qm-vision; preemptee path: /qm-research/qm-vision"
    )
    text = _preemption_text(victim, message, "InClusterQueue")
    assert text.startswith(
        f"Preempted by job “launch” (#{preemptor.pk}) of team Vision, tier production: a "
        "higher-priority job of your own team needed the GPUs."
    )
    stranger = message.replace(preemptor.k8s_uid, "00000000-0000-0000-0000-000000000000")
    assert _preemption_text(victim, stranger, "InClusterQueue").startswith(
        "Preempted by a workload of ClusterQueue qm-vision: a higher-priority job"
    )


def _pod(name, namespace, statuses, deleting=False):
    meta = {"name": name, "namespace": namespace}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    limits = {"nvidia.com/gpu": "1"}
    return {
        "metadata": meta,
        "spec": {"nodeName": "n1", "containers": [{"resources": {"limits": limits}}]},
        "status": {"phase": "Running", "containerStatuses": statuses},
    }


@pytest.mark.django_db
def test_a_pod_restarted_in_place_shows_its_failed_runs_exit_code():
    """A PyTorchJob's container (restartPolicy OnFailure) restarts in the same pod: its failed
    run is only in lastState. The pod shows that exit code, and a pod being deleted shows its
    own failure rather than the 143 of the stop that deletes it."""
    from queues.services.jobs.sync import _sync_pods
    from tests.factories import JobFactory

    job = JobFactory(kind=Job.Kind.PYTORCHJOB)
    ns, now = job.team.namespace, timezone.now()
    ended = {"exitCode": 2, "startedAt": "2026-01-01T00:00:00Z",
             "finishedAt": "2026-01-01T00:00:02Z"}  # fmt: skip
    stopped = {**ended, "exitCode": 143}
    _sync_pods(job, [
        _pod("m-0", ns, [{"state": {"waiting": {"reason": "CrashLoopBackOff"}},
                          "lastState": {"terminated": ended}, "restartCount": 1}]),
        _pod("w-0", ns, [{"state": {"terminated": stopped}, "lastState": {"terminated": ended}}],
             deleting=True),
        _pod("w-1", ns, [{"state": {"terminated": {**ended, "exitCode": 0}},
                          "lastState": {"terminated": ended}}]),
    ], {}, now)  # fmt: skip
    codes = dict(JobPod.objects.filter(job=job).values_list("name", "exit_code"))
    # w-1 failed once, then its restarted run ended well: its own end counts.
    assert codes == {"m-0": 2, "w-0": 2, "w-1": 0}


def test_the_last_cancelled_jobs_pods_close_on_the_periodic_sync(
    sim_jobs, eager_tasks, django_capture_on_commit_callbacks
):
    """The beat's sync also follows a cluster whose jobs have all ended lately: the pods of
    the last job cancelled there close when they have gone (they stayed open, holding their
    GPUs on the pod list, when only clusters with active jobs were synced)."""
    from queues.services.jobs.sync import jobs_sync_all

    with django_capture_on_commit_callbacks(execute=True):
        job = submit(sim_jobs, expected_runtime_seconds=600)
    job = sync_until(job, Job.State.RUNNING)
    assert job.pods.filter(finished_at__isnull=True).count() == 1
    with django_capture_on_commit_callbacks(execute=True):
        job_cancel(job=job, user=sim_jobs["alice"])
    assert _cluster_jobs(sim_jobs["sim"], job) == []
    results = jobs_sync_all()
    assert results[job.cluster.name]["jobs"] == 1
    (pod,) = job.pods.all()
    assert pod.finished_at is not None and pod.phase == "Deleted"


def _workload(sim_jobs, job) -> dict | None:
    for wl in sim_jobs["sim"].kube.list(
        "kueue.x-k8s.io/v1beta2", "Workload", namespace=job.team.namespace
    ):
        if any(o.get("name") == job.k8s_name for o in wl["metadata"].get("ownerReferences") or []):
            return wl
    return None


def _condition(wl, kind) -> bool:
    return any(
        c["type"] == kind and c["status"] == "True"
        for c in ((wl or {}).get("status") or {}).get("conditions") or []
    )


def test_a_preemption_between_two_syncs_is_kept_in_the_jobs_history(sim_jobs, client, api_as):
    """Preempted and admitted again before the sync looked: the Workload's conditions no longer
    say so, Kueue's eviction count does; the history records it with who preempted the job."""
    from queues.services.jobs.apply import job_delete_objects
    from tests.conftest import wait_until

    low = submit(sim_jobs, name="low", gpus_per_worker=8, tier="development")
    job_apply(job_id=low.pk)
    low = sync_until(low, Job.State.RUNNING)
    high = submit(sim_jobs, name="urgent", user="bob", gpus_per_worker=8, tier="production")
    job_apply(job_id=high.pk)
    assert wait_until(lambda: _condition(_workload(sim_jobs, low), "Evicted"), timeout=20)
    high.refresh_from_db()
    job_delete_objects(job_id=high.pk)  # the urgent job goes: the low one is admitted again
    assert wait_until(lambda: _condition(_workload(sim_jobs, low), "Admitted"), timeout=20)
    low = sync_until(low, Job.State.RUNNING)
    states = list(low.transitions.values_list("to_state", flat=True))
    assert states[-3:] == ["preempted", "admitted", "running"], states
    preemption = low.transitions.get(to_state="preempted")
    assert "urgent" in preemption.reason and "production" in preemption.reason
    assert low.preemptions == 1 and "urgent" in low.preemption_reason
    # Seen again, it is not recorded twice.
    jobs_sync_cluster(cluster=low.cluster)
    assert low.transitions.filter(to_state="preempted").count() == 1
    body = api_as(sim_jobs["alice"]).get(f"/api/v1/jobs/{low.pk}/").json()
    assert body["preemptions"] == 1
    preempted = [t for t in body["transitions"] if t["to_state"] == "preempted"]
    assert len(preempted) == 1 and "urgent" in preempted[0]["reason"]
    client.force_login(sim_jobs["alice"])
    page = client.get(f"/jobs/{low.pk}/").content.decode()
    assert "Preempted" in page and "urgent" in page
