"""Jobs into the cluster: claim a cluster's submitted jobs in batches, apply their objects by
server-side apply (idempotent: deterministic names, generations), delete a cancelled job's
objects, and find applies that were lost."""

from __future__ import annotations

import hashlib
import logging
import os
import socket
from collections import Counter
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from core.metrics import JOB_APPLIES, JOB_APPLY_RETRIES
from core.outage import DATABASE_DOWN
from fleet import kube
from fleet.models import Cluster
from fleet.selectors.clusters import cluster_wait_reason
from fleet.services.cluster_health import cluster_may_call
from queues.backends import backend_for
from queues.manifests import jobs as job_manifests
from queues.models import Job
from queues.selectors.storage import pull_secret_names
from queues.services.jobs.lifecycle import TransitionError, job_transition, jobs_transition

log = logging.getLogger(__name__)
S = Job.State

# A request to apply a cluster's jobs is made again when its message has not been taken for
# this long (lost with a restarted broker, say).
APPLY_REQUEST_FRESH = timedelta(seconds=10)


def jobs_apply_request(*, cluster_id: int) -> bool:
    """Ask a worker to apply the cluster's submitted jobs; True when a message was sent.

    Submissions call this after they commit, and only the first of a burst sends a message:
    the worker clears the request before it reads the jobs, so a job committed before the
    clearing is read by that worker and one committed after it asks again. A request older than
    APPLY_REQUEST_FRESH is made again, in case its message was lost. The message is delivered
    JOBS_APPLY_GATHER_SECONDS late, so that under load one batch takes what arrived meanwhile.
    """
    from queues.tasks import apply_jobs

    now = timezone.now()
    pending = Q(jobs_apply_requested_at__isnull=True) | Q(
        jobs_apply_requested_at__lt=now - APPLY_REQUEST_FRESH
    )
    if not Cluster.objects.filter(pending, pk=cluster_id).update(jobs_apply_requested_at=now):
        return False
    apply_jobs.apply_async((cluster_id,), countdown=settings.JOBS_APPLY_GATHER_SECONDS or None)
    return True


# Apply tasks lost with a dead worker or a flushed broker are sent again after this long.
REAPPLY_AFTER = timedelta(seconds=30)
# Jobs one drain claims at a time, and how long a claim holds if its worker dies.
APPLY_BATCH = 50
APPLY_CLAIM_TTL = timedelta(minutes=2)
# How long one worker holds a cluster's apply lease (renewed per batch): one worker at a time
# applies a cluster's jobs, so a cluster that hangs occupies one worker, never all of them.
APPLY_LEASE = timedelta(seconds=90)
# When another worker holds the lease, ask again after this long.
LEASE_BUSY_RETRY_SECONDS = 2.0


# What applying and deleting a job read: the renderer's fields (queues.job_manifests), the
# cluster's connection settings (fleet.kube.client_for) and the apply bookkeeping. Loading only
# these keeps the apply task's one query to a third of the columns; a test pins the task's query
# count, so a renderer that starts reading another field fails it instead of costing a hidden
# query per job.
APPLY_FIELDS = (
    "name", "k8s_name", "image", "command", "args", "env", "workers", "gpus_per_worker", "gang",
    "max_runtime_seconds", "expected_runtime_seconds", "retry_limit", "state", "cpu_millis",
    "memory_mib", "shm_mib", "volumes", "secret_env", "team_id", "cluster_id", "topology_level",
    "topology_mode", "pool__topology_levels", "kind", "driver_command", "pool__sharing",
    "pool__mig_profile", "pool__mig_strategy", "pool__shares_renamed", "interruptible",
    "checkpoint_volume", "checkpoint_path", "local_queue", "priority_class",
    "applied_generation",
    "desired_generation", "team__slug", "team__namespace", "tier__name", "pool__name",
    "pool__node_selector", "pool__tolerations", "cluster__name", "cluster__kubeconfig_path",
    "cluster__context", "cluster__in_cluster", "cluster__scheduler", "cluster__kueue_api_version",
    "cluster__enabled", "cluster__deleted_at", "team__pod_security_exempt",
)  # fmt: skip


def _apply_query():
    return Job.objects.select_related("team", "tier", "pool", "cluster").only(*APPLY_FIELDS)


def _jobs_for_cluster(job_ids) -> list[Job]:
    return list(_apply_query().filter(pk__in=list(job_ids)).order_by("pk"))


def jobs_apply_ready(*, cluster_id: int, run: str = "") -> dict[str, int]:
    """Apply the cluster's submitted jobs that no other worker is applying, a batch at a time,
    until none is left; returns how many ended which way ("applied", "failed", ...).

    One worker at a time drains a cluster (its apply lease); another that is asked meanwhile
    asks again in a moment, so a job submitted during a drain is never left behind. A disabled
    cluster, or one whose breaker is open (it did not answer lately), is not tried: its jobs are
    told why they wait, and the next request after the breaker's retry time tries again.

    The request that sent us is cleared first (see jobs_apply_request): a job submitted after
    that asks again, one submitted before it is found here. Jobs are claimed, so that workers
    draining the same cluster take different ones. Transient errors propagate (the task
    retries) after what reached the cluster is recorded and the rest given back.

    `run` names the task run (core.worker.current_run_id; its retries keep it). A drain cut off
    by the database going away cannot give its lease and claims back on the way out; its
    retry, the same run, takes them back at once instead of waiting for them to expire.
    """
    from queues.tasks import apply_jobs

    cluster = Cluster.objects.filter(pk=cluster_id).first()
    if cluster is None:
        return {}
    if not cluster_may_call(cluster=cluster):
        Cluster.objects.filter(pk=cluster_id).update(jobs_apply_requested_at=None)
        return {
            "waiting": jobs_tell_waiting(
                cluster=cluster, reason=cluster_wait_reason(cluster=cluster)
            )
        }
    holder = f"{claim_holder()}/{run}"
    if not _lease(cluster_id, holder):
        apply_jobs.apply_async((cluster_id,), countdown=LEASE_BUSY_RETRY_SECONDS)
        return {"busy": 1}
    try:
        Cluster.objects.filter(pk=cluster_id).update(jobs_apply_requested_at=None)
        counts: Counter[str] = Counter()
        while True:
            jobs = _claim(cluster_id, holder)
            outcomes = _apply(jobs, claimed=True)
            counts.update(outcomes.values())
            # A short batch means nothing else was waiting; a full one in which no job was
            # applied or failed would only come round again.
            settled = any(o.startswith(("applied", "failed")) for o in outcomes.values())
            if len(jobs) < APPLY_BATCH or not settled:
                break
            _lease(cluster_id, holder, renew=True)
    finally:
        _give_back(
            f"the apply lease of cluster {cluster_id}",
            Cluster.objects.filter(pk=cluster_id, apply_lease_by=holder),
            apply_lease_until=None, apply_lease_by="",
        )  # fmt: skip
    if counts.get("waiting for namespace"):
        # The reconciler creates team namespaces; it asks for this apply again when it is done.
        from queues.tasks import reconcile_cluster

        reconcile_cluster.delay(cluster_id)
    return dict(counts)


NAMESPACE_WAIT_PREFIX = "Waiting for namespace"


def jobs_waiting_for_namespace(*, cluster_id: int) -> bool:
    return (
        _waiting_to_apply(cluster_id)
        .filter(pending_reason__startswith=NAMESPACE_WAIT_PREFIX)
        .exists()
    )


def _lease(cluster_id: int, holder: str, *, renew: bool = False) -> bool:
    """Take (or renew) the cluster's apply lease; False while another worker holds it. A lease
    held by an earlier try of the same run (cut off before it could give it back), or by a
    worker process of this host that is gone, is free."""
    now = timezone.now()
    free = Q(apply_lease_until__isnull=True) | Q(apply_lease_until__lt=now)
    if run := _run_of(holder):
        free |= Q(apply_lease_by__endswith=f"/{run}")
    fields = {"apply_lease_until": now + APPLY_LEASE, "apply_lease_by": holder}
    if Cluster.objects.filter(Q() if renew else free, pk=cluster_id).update(**fields):
        return True
    held_by = Cluster.objects.filter(pk=cluster_id).values_list("apply_lease_by", flat=True)
    gone = [h for h in held_by if h and holder_dead(h)]
    return bool(gone) and bool(
        Cluster.objects.filter(pk=cluster_id, apply_lease_by=gone[0]).update(**fields)
    )


def _run_of(holder: str) -> str:
    return holder.rpartition("/")[2]


def _give_back(what: str, rows, **fields) -> None:
    """Release what a drain held on its way out. With the database gone this cannot be
    written: it is logged and left to the task's retry (same run), which takes it back."""
    try:
        rows.update(**fields)
    except DATABASE_DOWN as exc:
        log.warning("could not give back %s (the retry takes it back): %s", what, exc)


def _waiting_to_apply(cluster_id: int):
    return Job.objects.filter(
        cluster_id=cluster_id, state=S.SUBMITTED, applied_generation__lt=F("desired_generation")
    )


def jobs_tell_waiting(*, cluster: Cluster, reason: str) -> int:
    """Write why the cluster's unapplied submitted jobs wait (shown on their pages)."""
    return (
        _waiting_to_apply(cluster.pk).exclude(pending_reason=reason).update(pending_reason=reason)
    )


def jobs_apply_retrying(exc, attempt: int, next_at, cluster_id: int) -> None:
    """The apply task failed with a transient error: tell the jobs waiting for it what the
    cluster said, which attempt that was and when the next one is (on_retry of apply_jobs)."""
    cluster = Cluster.objects.filter(pk=cluster_id).first()
    if cluster is None:
        return
    JOB_APPLY_RETRIES.labels(cluster.name).inc()
    said = exc.describe() if isinstance(exc, kube.KubeError) else str(exc)
    if next_at is not None:
        when = timezone.localtime(next_at)
        then = f"retrying (attempt {attempt + 1} at {when:%H:%M:%S})"
    else:
        then = "retrying with the next sync, within a minute"
    wait = cluster_wait_reason(cluster=cluster)
    reason = wait or f"Cluster {cluster.name} did not take the job yet ({said[:300]}); {then}."
    _waiting_to_apply(cluster_id).update(pending_reason=reason, apply_error=said[:4000])


def _unclaimed(now, run: str = "") -> Q:
    """Jobs no worker is applying: never claimed, claimed so long ago the worker is gone, or
    claimed by an earlier try of this same run (cut off before it could give them back)."""
    free = Q(apply_claimed_at__isnull=True) | Q(apply_claimed_at__lt=now - APPLY_CLAIM_TTL)
    return free | Q(apply_claimed_by__endswith=f"/{run}") if run else free


def _claim(cluster_id: int, holder: str) -> list[Job]:
    """Up to APPLY_BATCH of the cluster's unapplied submitted jobs, read and marked as ours in
    one short transaction (rows another worker is claiming right now are skipped)."""
    now = timezone.now()
    with transaction.atomic():
        jobs = list(
            _apply_query()
            .select_for_update(skip_locked=True, of=("self",))
            .filter(_unclaimed(now, _run_of(holder)), cluster_id=cluster_id, state=S.SUBMITTED)
            .filter(applied_generation__lt=F("desired_generation"))
            .order_by("pk")[:APPLY_BATCH]
        )
        if jobs:
            Job.objects.filter(pk__in=[j.pk for j in jobs]).update(
                apply_claimed_at=now, apply_claimed_by=holder
            )
    return jobs


def claim_holder() -> str:
    """Who claims: this worker process, as "host:pid" (a drain adds "/<run>")."""
    return f"{this_host_prefix()}{os.getpid()}"


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, someone else's
        return True
    return True


def this_host_prefix() -> str:
    """The start of the claims held by worker processes on this host (see claim_holder)."""
    return f"{socket.gethostname()}:"


def holder_dead(holder: str) -> bool:
    """Whether a claim's holder is a process of this host that no longer exists (a holder on
    another host cannot be told: False)."""
    prefix = this_host_prefix()
    pid = holder[len(prefix) :].partition("/")[0] if holder.startswith(prefix) else ""
    return pid.isdigit() and not _process_alive(int(pid))


def claims_release_dead() -> int:
    """Release claims held by worker processes on this host that no longer exist (a killed
    worker's jobs are taken over at once instead of after APPLY_CLAIM_TTL); returns how many.
    Worker processes call this when they start (queues.apps)."""
    held = (
        Job.objects.filter(
            state=S.SUBMITTED,
            apply_claimed_at__isnull=False,
            apply_claimed_by__startswith=this_host_prefix(),
        )
        .values_list("apply_claimed_by", flat=True)
        .distinct()
    )
    dead = [holder for holder in held if holder_dead(holder)]
    if not dead:
        return 0
    released = Job.objects.filter(state=S.SUBMITTED, apply_claimed_by__in=dead).update(
        apply_claimed_at=None, apply_claimed_by=""
    )
    log.info("released %d job claim(s) of dead worker process(es) %s", released, dead)
    return released


def job_apply(*, job_id: int) -> str:
    """Create or update one job's objects in its cluster now; returns what happened.

    Transient errors propagate (the task retries); permanent ones fail the job with the reason.
    """
    return _apply(_jobs_for_cluster([job_id])).get(job_id, "skipped (gone)")


def _apply(jobs: list[Job], *, claimed: bool = False) -> dict[int, str]:
    """Apply each job's objects, then record the applied ones as queued in one transaction."""
    outcomes: dict[int, str] = {}
    applied: dict[int, dict] = {}
    moved: set[int] = set()
    # The teams' image pull secrets on the jobs' clusters, for the whole batch at once.
    pull_secrets = pull_secret_names(pairs={(j.team_id, j.cluster_id) for j in jobs})
    try:
        for job in jobs:
            outcomes[job.pk] = _apply_objects(
                job, applied, pull_secrets.get((job.team_id, job.cluster_id), [])
            )
    finally:
        # Record what reached the cluster even when a transient error ends the batch early.
        if applied:
            moved = set(
                jobs_transition(
                    fields_by_job=applied,
                    to_state=S.QUEUED,
                    from_state=S.SUBMITTED,
                    reason="Created in the cluster; waiting for admission.",
                )
            )
        # Jobs neither recorded nor failed (a transient error stopped the batch, say) go back
        # for the next drain or this task's retry.
        leftover = [j.pk for j in jobs if j.pk not in moved and outcomes.get(j.pk) != "failed"]
        if claimed and leftover:
            _give_back(
                f"the claims on jobs {leftover}",
                Job.objects.filter(pk__in=leftover, state=S.SUBMITTED),
                apply_claimed_at=None, apply_claimed_by="",
            )  # fmt: skip
    for job_id in set(applied) - moved:
        outcomes[job_id] = _applied_but_not_submitted(job_id, applied[job_id])
    for job in jobs:
        if job.pk in outcomes:
            where = job.cluster.name if job.cluster_id else ""
            JOB_APPLIES.labels(where, _outcome_kind(outcomes[job.pk])).inc()
    return outcomes


def _outcome_kind(outcome: str) -> str:
    """applied, failed, waiting (for its namespace) or skipped (not to apply, or already)."""
    for kind in ("applied", "failed", "waiting"):
        if outcome.startswith(kind):
            return kind
    return "skipped"


def _apply_objects(job: Job, applied: dict[int, dict], pull_secrets: list[str]) -> str:
    if job.state != S.SUBMITTED:
        return f"skipped ({job.state})"
    if job.applied_generation >= job.desired_generation:
        return "already applied"
    if job.cluster is None:
        _fail_apply(job, "No cluster is registered to run this job on.")
        return "failed"
    client = kube.client_for(job.cluster)
    uid = ""
    try:
        objects = backend_for(job.cluster).job_objects(job, pull_secrets=pull_secrets)
        for obj in objects:
            stored = client.apply(obj)
            uid = (stored.get("metadata") or {}).get("uid", uid)
    except kube.PermanentError as exc:
        if _namespace_missing(exc):
            reason = (
                f"{NAMESPACE_WAIT_PREFIX} {job.team.namespace} in cluster {job.cluster.name}: "
                "the portal is creating it, and the job is sent as soon as it exists."
            )
            Job.objects.filter(pk=job.pk).update(pending_reason=reason)
            return "waiting for namespace"
        _fail_apply(job, f"The cluster refused the job: {exc.describe()}")
        return "failed"
    applied[job.pk] = {
        "k8s_uid": uid,
        "applied_generation": job.desired_generation,
        "apply_error": "",
        "workload_name": _workload_name(job),
        "apply_claimed_at": None,
        "apply_claimed_by": "",
        "pending_reason": "",
    }
    return "applied"


def _namespace_missing(exc: kube.PermanentError) -> bool:
    """A 404 for the namespace itself: the reconciler has not created it yet. A wait, not a
    failure (the real API server words it 'namespaces "<name>" not found')."""
    return exc.status == 404 and exc.message.startswith('namespaces "')


def _applied_but_not_submitted(job_id: int, fields: dict) -> str:
    """The job left `submitted` while we applied it. Cancelled: what we just created is deleted.
    Otherwise (applied twice, say) its apply bookkeeping is brought up to date."""
    if Job.objects.filter(pk=job_id, state=S.CANCELLED).exists():
        job_delete_objects(job_id=job_id)
        return "applied, then deleted (cancelled meanwhile)"
    Job.objects.filter(pk=job_id).update(**fields)
    return "applied"


def _workload_name(job: Job) -> str:
    """Kueue's Workload name for the job's object (deterministic: name, kind and group)."""
    group, kind = job_manifests.KIND_GROUPS[job.kind]
    digest = hashlib.sha1(f"{job.k8s_name}/{group}/{kind}".encode()).hexdigest()[:5]
    return f"{kind.lower()}-{job.k8s_name}"[:247] + f"-{digest}"


def _fail_apply(job: Job, message: str) -> None:
    try:
        job_transition(
            job_id=job.pk,
            to_state=S.FAILED,
            reason=message,
            from_states=(S.SUBMITTED,),
            fields={"apply_error": message[:4000], "exit_reason": message[:4000]},
        )
    except TransitionError:
        log.warning("job %s: could not record apply failure: %s", job.pk, message)


def job_delete_objects(*, job_id: int) -> int:
    """Delete the job's objects from its cluster (pods go in the background); returns count.

    A disabled cluster gets no writes: the deletion stays pending (Job.cluster_delete_pending)
    and is carried out when the cluster is enabled again (queues.services.cluster_lifecycle)
    or by the reconciler (jobs_delete_pending). A cluster that does not answer raises a
    transient error (the task retries; the reconciler sends it again after that)."""
    found = _jobs_for_cluster([job_id])
    if not found or found[0].cluster is None or not found[0].k8s_name:
        Job.objects.filter(pk=job_id).update(cluster_delete_pending=False)
        return 0
    job = found[0]
    cluster = job.cluster
    if cluster.deleted_at is not None:  # its namespaces go with it (cluster_lifecycle)
        Job.objects.filter(pk=job_id).update(cluster_delete_pending=False)
        return 0
    if not cluster.enabled:
        log.info("job %s: cluster %s is disabled; its deletion waits", job_id, cluster.name)
        return 0
    client = kube.client_for(cluster)
    deleted = 0
    for obj in backend_for(cluster).job_objects(job):
        meta = obj["metadata"]
        if client.delete(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace")):
            deleted += 1
    Job.objects.filter(pk=job_id).update(cluster_delete_pending=False)
    return deleted


# A pending deletion the task did not carry out (retries given up, a lost message) is sent
# again by the reconciler after this long.
DELETE_RETRY_AFTER = timedelta(minutes=1)


def jobs_delete_pending(*, cluster_id: int | None = None, now=None) -> list[int]:
    """Cancelled jobs whose objects still wait to be deleted from an enabled cluster (all of
    one cluster's when `cluster_id` is given, else those cancelled a while ago)."""
    now = now or timezone.now()
    jobs = Job.objects.filter(
        cluster_delete_pending=True, cluster__enabled=True, cluster__deleted_at__isnull=True
    )
    if cluster_id is not None:
        jobs = jobs.filter(cluster_id=cluster_id)
    else:
        jobs = jobs.filter(finished_at__lt=now - DELETE_RETRY_AFTER)
    return list(jobs.order_by("pk").values_list("pk", flat=True)[:500])


def jobs_reapply_lost(*, now=None) -> dict[int | None, list[int]]:
    """Jobs whose apply never happened (lost message, dead worker) and is due again, by cluster."""
    now = now or timezone.now()
    lost = (
        Job.objects.filter(_unclaimed(now), state=S.SUBMITTED, submitted_at__lt=now - REAPPLY_AFTER)
        .exclude(cluster__enabled=False)
        .filter(applied_generation__lt=F("desired_generation"))
        .order_by("pk")
        .values_list("cluster_id", "pk")[:500]
    )
    by_cluster: dict[int | None, list[int]] = {}
    for cluster_id, job_id in lost:
        by_cluster.setdefault(cluster_id, []).append(job_id)
    return by_cluster
