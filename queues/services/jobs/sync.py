"""Jobs from the cluster: read what one list per kind shows and bring every active job up to date
(state with the cluster's timestamps, pods, why it waits, queue position, estimated start).

The database holds what users asked for; the cluster holds what happened. A sync is a pure
function of those lists, so it is safe to run from a periodic task, a watch loop, or both.
What each scheduler shows of a job, and what it means, is its backend's (queues.backends);
the pods, why jobs wait and until when, and the events kept are the same for all.
"""

from __future__ import annotations

import logging
from bisect import bisect_left
from datetime import timedelta

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from fleet import kube
from fleet.models import Cluster, NodePool
from fleet.models.inventory import is_gpu_resource
from fleet.services.cluster_health import cluster_may_call
from queues.backends import Observed, backend_for
from queues.manifests.common import LABEL_JOB_ID, MANAGED_SELECTOR
from queues.models import Job, JobPod, JobTransition
from queues.selectors.jobs import (
    WAITING_STATES,
    job_pools,
    pending_reason_text,
    start_estimator,
)
from queues.services.jobs.events import jobs_keep_events
from queues.services.jobs.lifecycle import TransitionError
from queues.services.jobs.recording import SUSPENDED_TEXT, cluster_time, job_fields_set

log = logging.getLogger(__name__)
S = Job.State

ACTIVE_STATES = (S.SUBMITTED, S.QUEUED, S.ADMITTED, S.RUNNING, S.PREEMPTED)
# A job that ended is synced this long more: its pods' final records (the last pod of a
# cancelled job closes when it has gone from the cluster).
FINAL_RECORDS_FOR = timedelta(minutes=10)


def _to_sync(now) -> Q:
    """The jobs a sync follows: the active ones and those that ended lately."""
    recent = Q(finished_at__gte=now - FINAL_RECORDS_FOR, state__in=Job.FINAL_STATES)
    return Q(state__in=ACTIVE_STATES) | recent


# ----------------------------------------------------------------------------------- sync


def cluster_observe(*, cluster: Cluster, client, teams_pending=(), kinds=("job",)) -> Observed:
    """List the cluster's jobs (of the given kinds) and what its scheduler shows of them (its
    backend: Kueue's workloads and queue positions), then the pods (one request per kind)."""
    seen = Observed(events_of=_events_reader(client))
    backend_for(cluster).observe(
        cluster=cluster, client=client, seen=seen, teams_pending=teams_pending, kinds=kinds
    )
    for pod in client.list("v1", "Pod", label_selector=MANAGED_SELECTOR):
        job_id = ((pod["metadata"].get("labels") or {}).get(LABEL_JOB_ID)) or ""
        if job_id.isdigit():
            seen.pods.setdefault(int(job_id), []).append(pod)
    return seen


def _events_reader(client):
    """A namespace's Events, listed once when first asked (rarely: a missed preemption)."""
    read: dict[str, list[dict]] = {}

    def events_of(namespace: str) -> list[dict]:
        if namespace not in read:
            try:
                read[namespace] = client.list("v1", "Event", namespace=namespace)
            except kube.KubeError as exc:
                log.info("events of %s not read: %s", namespace, exc)
                read[namespace] = []
        return read[namespace]

    return events_of


def jobs_sync_cluster(*, cluster: Cluster, now=None) -> dict:
    """Bring every active job of the cluster up to date with what the cluster reports."""
    now = now or timezone.now()
    jobs = list(
        Job.objects.filter(cluster=cluster)
        .filter(_to_sync(now))
        .exclude(k8s_name="")
        .select_related("team", "team__department", "pool", "pool__gpu_model", "tier")
    )
    counts = {"jobs": len(jobs), "transitions": 0, "pods": 0}
    if not jobs:
        return counts
    client = kube.client_for(cluster)
    pending_teams = {j.team_id: j.team for j in jobs if j.state in (S.QUEUED, S.PREEMPTED)}
    seen = cluster_observe(
        cluster=cluster, client=client, teams_pending=pending_teams.values(),
        kinds={j.kind for j in jobs},
    )  # fmt: skip
    pools = {p.name: p for p in NodePool.objects.filter(cluster=cluster)}
    pods_by_job = {}
    for pod in JobPod.objects.filter(job__in=[j.pk for j in jobs]):
        pods_by_job.setdefault(pod.job_id, {})[(pod.namespace, pod.name)] = pod
    backend = backend_for(cluster)
    for job in jobs:
        key = (job.team.namespace, job.k8s_name)
        counts["pods"] += _sync_pods(
            job, seen.pods.get(job.pk, []), pods_by_job.get(job.pk, {}), now,
            keep_log=lambda ns, name: _log_tail(client, ns, name),
        )  # fmt: skip
        if job.state in Job.FINAL_STATES:
            continue
        obj = seen.jobs.get(key)
        if obj is not None and job.state == S.SUBMITTED:
            _adopt(job, obj, seen.workloads.get(key))
        try:
            changed = backend.sync_job(job, obj=obj, seen=seen, pools=pools, now=now)
        except TransitionError as exc:
            log.info("job %s: %s", job.pk, exc)
            changed = False
        counts["transitions"] += int(bool(changed))
    _explain_waiting(seen.waiting, jobs, now, backend=backend, gpus_ahead=seen.gpus_ahead)
    counts["events_kept"] = jobs_keep_events(client=client, jobs=jobs, now=now)
    return counts


def _adopt(job: Job, obj: dict, wl: dict | None) -> None:
    """The job's objects exist but the portal never recorded applying them (the worker that
    created them was killed first): record them as applied, with their uid and workload, and
    drop the dead worker's claim, so that the job is watched like any other from now on (and
    declared lost if its objects are deleted)."""
    if job.applied_generation >= job.desired_generation:
        return
    job_fields_set(
        job,
        applied_generation=job.desired_generation,
        k8s_uid=(obj.get("metadata") or {}).get("uid", "") or job.k8s_uid,
        workload_name=((wl or {}).get("metadata") or {}).get("name", "") or job.workload_name,
        apply_claimed_at=None,
        apply_claimed_by="",
        apply_error="",
    )
    log.info("job %s: adopted objects created by a worker that did not record them", job.pk)


def _explain_waiting(
    waiting: list[tuple[Job, str, dict | None]], jobs: list[Job], now, *, backend=None,
    gpus_ahead=None,
) -> None:  # fmt: skip
    """Why each waiting job waits, its queue position and estimated start, written after the
    sync has recorded every admission, so the figures in the texts are this sync's.

    Jobs alike in team, pool, size and Kueue message wait for the same reason: it is computed
    once. The GPUs ahead of a job are those of its team's waiting jobs earlier in the team's
    queue (on Volcano, `gpus_ahead`: those of the PodGroups before it in its pool's queue); one
    estimator per team and pool (the backend's) reads the running jobs once, however many wait.
    """
    gpus_ahead = gpus_ahead or {}
    position = {job.pk: values["queue_position"] for job, _, values in waiting if values}
    queues: dict[int, list[tuple[int, int]]] = {}
    for job in jobs:
        # Every job explained here counts, even one whose move to queued lost a race.
        at = position.get(job.pk, job.queue_position)
        if (job.pk in position or job.state in WAITING_STATES) and at is not None:
            queues.setdefault(job.team_id, []).append((at, job.total_gpus))
    ahead_by_team = {}
    for team_id, queue in queues.items():
        queue.sort()
        before = [0]  # before[i]: GPUs of the first i jobs in the queue
        for _, gpus in queue:
            before.append(before[-1] + gpus)
        ahead_by_team[team_id] = ([at for at, _ in queue], before)
    reasons, estimators = {}, {}
    for job, message, values in waiting:
        shape = (job.team_id, job.pool_id, job.total_gpus, message, job.local_queue)
        if shape not in reasons:
            reasons[shape] = pending_reason_text(job=job, message=message)
        if job.idle_suspended_at is not None:  # inactive: no queue, no estimate
            job_fields_set(job, **values, pending_reason=SUSPENDED_TEXT, estimated_start=None,
                 estimate_basis="No estimate while the job is suspended.")  # fmt: skip
            continue
        if values is None:  # no queue visible to place the job in
            job_fields_set(job, pending_reason=reasons[shape])
            continue
        if job.team.queue_hold_reason:  # nothing starts while the queue is held
            job_fields_set(job, **values, pending_reason=reasons[shape], estimated_start=None,
                 estimate_basis="No estimate while the team's queue is held.")  # fmt: skip
            continue
        where = (job.team_id, job.pool_id)
        if where not in estimators:
            pools = job_pools(team=job.team, pool=job.pool)
            estimators[where] = pools and (
                backend.start_estimator(team=job.team, pools=pools, now=now)
                if backend is not None
                else start_estimator(team=job.team, pools=pools, now=now)
            )
        estimate, basis = None, ""  # without a pool to wait in, nothing to estimate from
        if estimators[where]:
            ahead = 0
            key = (job.team.namespace, job.k8s_name)
            if key in gpus_ahead:
                ahead = gpus_ahead[key]
            elif values["queue_position"] is not None:
                positions, before = ahead_by_team[job.team_id]
                ahead = before[bisect_left(positions, values["queue_position"])]
            estimate, basis = estimators[where](gpus=job.total_gpus, ahead=ahead)
        job_fields_set(job, **values, pending_reason=reasons[shape], estimated_start=estimate,
             estimate_basis=basis)  # fmt: skip


def _sync_pods(job: Job, pods: list[dict], known: dict, now, keep_log=None) -> int:
    """Upsert JobPod rows from the pods seen; close rows of pods that vanished. A pod that has
    ended gets the end of its log kept (`keep_log(namespace, name)`), once."""
    written = 0
    seen_keys = set()
    for pod in pods:
        meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
        key = (meta["namespace"], meta["name"])
        seen_keys.add(key)
        gpus = 0
        for c in spec.get("containers") or []:
            for name, limit in ((c.get("resources") or {}).get("limits") or {}).items():
                if is_gpu_resource(name):
                    gpus += int(str(limit))
        started = finished = exit_code = None
        deleted = bool(meta.get("deletionTimestamp"))
        for cs in status.get("containerStatuses") or []:
            state = cs.get("state") or {}
            last = (cs.get("lastState") or {}).get("terminated") or {}
            if "running" in state:
                started = started or cluster_time(state["running"].get("startedAt"))
            if "terminated" in state:
                term = state["terminated"]
                started = started or cluster_time(term.get("startedAt"))
                finished = cluster_time(term.get("finishedAt"))
                exit_code = term.get("exitCode")
            # A container restarted in place (a PyTorchJob's, restartPolicy OnFailure) shows
            # its failed run in its last state only; a pod being deleted, whose current end is
            # the stop (143) of whoever deleted it, too.
            if last.get("exitCode") is not None and ("terminated" not in state or deleted):
                exit_code = last["exitCode"]
        phase = status.get("phase", "")
        interrupted = any(
            c.get("type") == "DisruptionTarget" and c.get("status") == "True"
            for c in status.get("conditions") or []
        )
        row = known.get(key)
        if interrupted and (row is None or not row.interrupted):
            _note_interruption(job, meta["name"], spec.get("nodeName", ""), finished or now)
        values = {
            "interrupted": interrupted or bool(row and row.interrupted),
            "node_name": spec.get("nodeName", "") or "",
            "gpus": gpus,
            "phase": phase,
            "exit_code": exit_code,
            "started_at": started
            or (cluster_time(status.get("startTime")) if phase == "Running" else None),
            "finished_at": finished,
        }
        if finished and keep_log is not None and (row is None or not row.log_tail):
            values["log_tail"] = keep_log(*key)
        if row is None:
            JobPod.objects.update_or_create(
                namespace=key[0], name=key[1], defaults={"job": job, **values}
            )
            written += 1
            continue
        # Keep what we learned before (e.g. the start time) when the pod now reports less.
        values = {k: v for k, v in values.items() if v not in (None, "", []) or k == "exit_code"}
        if values.get("exit_code") is None:
            values.pop("exit_code", None)
        changed = {k: v for k, v in values.items() if getattr(row, k) != v}
        if changed:
            JobPod.objects.filter(pk=row.pk).update(**changed)
            written += 1
    for key, row in known.items():
        if key not in seen_keys and row.finished_at is None:
            # The pod is gone (preempted, cancelled, job finished): it held its GPUs until now.
            JobPod.objects.filter(pk=row.pk).update(
                finished_at=now,
                phase=row.phase if row.phase in ("Succeeded", "Failed") else "Deleted",
            )
            written += 1
    return written


def _note_interruption(job: Job, pod: str, node: str, at) -> None:
    """A worker stopped because its node was taken back goes on the timeline."""
    then = (
        f"resumes from its checkpoint on {job.checkpoint_volume}"
        if job.checkpoint_volume
        else "starts over (the job keeps no checkpoint)"
    )
    JobTransition.objects.create(
        job=job, from_state=job.state, to_state=job.state, at=at,
        reason=f"Interrupted: worker {pod} stopped because node {node or '?'} was taken back "
        f"(spot capacity); a new worker {then}.",
    )  # fmt: skip


def _log_tail(client, namespace: str, name: str) -> str:
    """The last JOB_LOG_KEEP_LINES lines of a pod that ended ("" when it cannot be read)."""
    try:
        return client.pod_log(namespace, name, tail=int(settings.JOB_LOG_KEEP_LINES))
    except kube.KubeError as exc:
        log.info("log of %s/%s not kept: %s", namespace, name, exc)
        return ""


def jobs_sync_all(*, now=None) -> dict:
    """Sync every enabled cluster that has active (or lately ended) jobs; one cluster's
    failure does not stop the rest. A cluster that did not answer lately is skipped until its
    breaker's next try (and then synced last), so a dead cluster costs the others nothing."""
    now = now or timezone.now()
    results = {}
    # Clusters whose jobs all ended lately too: a cluster's last jobs' pods close only there.
    cluster_ids = (
        Job.objects.filter(_to_sync(now), cluster__isnull=False)
        .values_list("cluster_id", flat=True)
        .distinct()
    )
    clusters = Cluster.objects.filter(pk__in=list(cluster_ids), enabled=True)
    for cluster in sorted(clusters, key=lambda c: (c.unreachable_since is not None, c.name)):
        if not cluster_may_call(cluster=cluster, now=now):
            results[cluster.name] = {"skipped": "unreachable"}
            continue
        try:
            results[cluster.name] = jobs_sync_cluster(cluster=cluster, now=now)
        except kube.ClusterBusy as exc:
            # Another worker waits on it for an answer: left alone until the next sync.
            log.info("job sync of %s skipped: %s", cluster.name, exc)
            results[cluster.name] = {"skipped": "not answering"}
        except kube.KubeError as exc:
            log.warning("job sync of %s failed: %s", cluster.name, exc)
            results[cluster.name] = {"error": str(exc)}
    return results
