"""Jobs from the cluster: read what one list per kind shows and bring every active job up to date
(state with the cluster's timestamps, pods, why it waits, queue position, estimated start).

The database holds what users asked for; the cluster holds what happened. A sync is a pure
function of those lists, so it is safe to run from a periodic task, a watch loop, or both.
(Over 400 lines: Kueue and Volcano status, pods and why-pending read best side by side.)
"""

from __future__ import annotations

import logging
import re
from bisect import bisect_left
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Q
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from fleet import kube
from fleet.models import Cluster, NodePool
from fleet.models.inventory import MIG_RESOURCE_PREFIX
from fleet.services.cluster_health import cluster_may_call
from queues.manifests.common import GPU_RESOURCE, LABEL_JOB_ID, MANAGED_SELECTOR
from queues.manifests.jobs import KIND_API_VERSIONS, KIND_GROUPS
from queues.manifests.quotas import cluster_queue_name, kueue_api_version
from queues.models import Job, JobPod, JobTransition
from queues.selectors.jobs import (
    WAITING_STATES,
    job_pools,
    pending_reason_text,
    start_estimator,
)
from queues.services.jobs.events import jobs_keep_events
from queues.services.jobs.lifecycle import TransitionError, job_transition

log = logging.getLogger(__name__)
S = Job.State

ACTIVE_STATES = (S.SUBMITTED, S.QUEUED, S.ADMITTED, S.RUNNING, S.PREEMPTED)
VISIBILITY = "/apis/visibility.kueue.x-k8s.io/{version}/clusterqueues/{cq}/pendingworkloads"
# A Job the portal applied but cannot find is only declared lost after this long, so a sync
# racing the apply task never fails a job that is being created.
LOST_AFTER = timedelta(seconds=60)
SUSPENDED_TEXT = (
    "Suspended because its GPUs were idle (the tier's idle-GPU policy); it waits until its "
    "owner or a team lead resumes it from the job page."
)
PREEMPTOR_RE = re.compile(r"preemptor: ([^/\s]+)/([^\s;]+)")
VIA_RE = re.compile(r"due to ([^;]+);")


# ----------------------------------------------------------------------------------- sync


def _time(value) -> datetime | None:
    if not value:
        return None
    parsed = parse_datetime(value)
    if parsed is not None and timezone.is_naive(parsed):
        parsed = timezone.make_aware(parsed, timezone.utc)
    return parsed


def _condition(obj: dict, ctype: str) -> dict | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype:
            return cond
    return None


def _true(obj: dict | None, ctype: str) -> dict | None:
    cond = _condition(obj or {}, ctype)
    return cond if cond and cond.get("status") == "True" else None


@dataclass
class Observed:
    """What one cluster looks like, from one list per kind."""

    jobs: dict = field(default_factory=dict)  # (ns, name) -> batch Job / vcjob
    workloads: dict = field(default_factory=dict)  # (ns, job name) -> Workload
    pods: dict = field(default_factory=dict)  # job id -> [pod]
    positions: dict = field(default_factory=dict)  # (ns, workload name) -> 1-based position
    # Jobs still waiting: (job, scheduler's message, Kueue's queue fields or None for Volcano)
    waiting: list = field(default_factory=list)


def cluster_observe(*, cluster: Cluster, client, teams_pending=(), kinds=("job",)) -> Observed:
    """List the cluster's jobs (of the given kinds), workloads and pods (one request per kind)
    and queue positions. PyTorchJobs and JobSets are seen as batch Jobs (`job_view`)."""
    seen = Observed()
    selector = MANAGED_SELECTOR
    volcano = cluster.scheduler == Cluster.Scheduler.VOLCANO
    if volcano:
        lists = [("batch.volcano.sh/v1alpha1", "Job")]
    else:
        lists = [(KIND_API_VERSIONS[k], KIND_GROUPS[k][1]) for k in sorted(set(kinds) | {"job"})]
    for api_version, kind in lists:
        for obj in client.list(api_version, kind, label_selector=selector):
            meta = obj["metadata"]
            seen.jobs[(meta["namespace"], meta["name"])] = job_view(obj)
    if not volcano:
        owners = {(KIND_API_VERSIONS[k], KIND_GROUPS[k][1]) for k in KIND_GROUPS}
        version = kueue_api_version(cluster)
        for wl in client.list(version, "Workload"):
            meta = wl["metadata"]
            for owner in meta.get("ownerReferences") or []:
                if (owner.get("apiVersion"), owner.get("kind")) in owners:
                    seen.workloads[(meta["namespace"], owner["name"])] = wl
        for team in teams_pending:
            path = VISIBILITY.format(
                version=cluster.kueue_api_version or "v1beta2",
                cq=cluster_queue_name(team),
            )
            try:
                summary = client.raw_get(path)
            except kube.KubeError as exc:
                log.info("visibility API for %s unavailable: %s", team.slug, exc)
                continue
            for item in summary.get("items") or []:
                meta = item.get("metadata") or {}
                pos = item.get("positionInClusterQueue")
                if pos is not None:
                    seen.positions[(meta.get("namespace"), meta.get("name"))] = int(pos) + 1
    for pod in client.list("v1", "Pod", label_selector=selector):
        job_id = ((pod["metadata"].get("labels") or {}).get(LABEL_JOB_ID)) or ""
        if job_id.isdigit():
            seen.pods.setdefault(int(job_id), []).append(pod)
    return seen


# What PyTorchJob and JobSet conditions mean in batch Job terms.
_DONE = {"PyTorchJob": {"Succeeded": "Complete", "Failed": "Failed"},
         "JobSet": {"Completed": "Complete", "Failed": "Failed"}}  # fmt: skip


def job_view(obj: dict) -> dict:
    """A PyTorchJob or JobSet as a batch/v1 Job's status reads (Complete/Failed conditions,
    start and completion times, active, ready and failed counts); a Job as it is."""
    kind = obj.get("kind")
    if kind not in _DONE:
        return obj
    status = obj.get("status") or {}
    conditions = [
        {**c, "type": _DONE[kind][c["type"]]}
        for c in status.get("conditions") or []
        if c.get("type") in _DONE[kind]
    ]
    if kind == "PyTorchJob":
        counts = list((status.get("replicaStatuses") or {}).values())
        view = {
            "startTime": status.get("startTime"),
            "completionTime": status.get("completionTime"),
            "active": sum(int(c.get("active") or 0) for c in counts),
            "failed": sum(int(c.get("failed") or 0) for c in counts),
        }
    else:
        counts = status.get("replicatedJobsStatus") or []
        done = next((c for c in conditions if c["status"] == "True"), None)
        view = {
            "completionTime": done.get("lastTransitionTime") if done else None,
            "active": sum(int(c.get("active") or 0) for c in counts),
            "ready": sum(int(c.get("ready") or 0) for c in counts),
            # A failed child restarts the whole set: each restart is a retry.
            "failed": int(status.get("restarts") or 0),
        }
    return {**obj, "status": {"conditions": conditions, **{k: v for k, v in view.items() if v}}}


def jobs_sync_cluster(*, cluster: Cluster, now=None) -> dict:
    """Bring every active job of the cluster up to date with what the cluster reports."""
    now = now or timezone.now()
    jobs = list(
        Job.objects.filter(cluster=cluster)
        .filter(
            Q(state__in=ACTIVE_STATES)
            # Finished recently: pick up the pods' final records.
            | Q(finished_at__gte=now - timedelta(minutes=10), state__in=Job.FINAL_STATES)
        )
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
    volcano = cluster.scheduler == Cluster.Scheduler.VOLCANO
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
            if volcano:
                changed = _sync_volcano_job(job, obj, seen, now)
            else:
                changed = _sync_kueue_job(job, obj, seen.workloads.get(key), seen, pools, now)
        except TransitionError as exc:
            log.info("job %s: %s", job.pk, exc)
            changed = False
        counts["transitions"] += int(bool(changed))
    _explain_waiting(seen.waiting, jobs, now)
    counts["events_kept"] = jobs_keep_events(client=client, jobs=jobs, now=now)
    return counts


def _move(job: Job, to_state: str, reason: str, *, at=None, fields=None) -> bool:
    if job.state == to_state:
        # Already there (a running job, say, seen again each sync): write only what changed,
        # without locking the row, so a sync of unchanged jobs writes nothing.
        _set(job, **(fields or {}))
        return False
    moved = job_transition(
        job_id=job.pk,
        to_state=to_state,
        reason=reason,
        at=at,
        fields=fields,
        from_states=(job.state,),
    )
    if moved:
        job.state = to_state
        return True
    return False


def _adopt(job: Job, obj: dict, wl: dict | None) -> None:
    """The job's objects exist but the portal never recorded applying them (the worker that
    created them was killed first): record them as applied, with their uid and workload, and
    drop the dead worker's claim, so that the job is watched like any other from now on (and
    declared lost if its objects are deleted)."""
    if job.applied_generation >= job.desired_generation:
        return
    _set(
        job,
        applied_generation=job.desired_generation,
        k8s_uid=(obj.get("metadata") or {}).get("uid", "") or job.k8s_uid,
        workload_name=((wl or {}).get("metadata") or {}).get("name", "") or job.workload_name,
        apply_claimed_at=None,
        apply_claimed_by="",
        apply_error="",
    )
    log.info("job %s: adopted objects created by a worker that did not record them", job.pk)


# The states a job passes through before it ends, in order, with what the cluster says of each.
_PATH = (S.QUEUED, S.ADMITTED, S.RUNNING)


def _catch_up(job: Job, stages: list[tuple[str, datetime | None, str]]) -> bool:
    """Record the states the cluster passed through that the sync did not see (a job that
    queued, ran and finished between two syncs), each at the cluster's own time, in order, so
    the timeline keeps them all. `stages` are (state, cluster time, reason) the cluster shows."""
    moved = False
    for state, at, reason in stages:
        if job.state == S.PREEMPTED or job.state in Job.FINAL_STATES:
            break
        current = _PATH.index(job.state) if job.state in _PATH else -1  # submitted: before all
        if _PATH.index(state) > current:
            moved = _move(job, state, reason, at=at) or moved
    return moved


def _pods_started(pods: list[dict]) -> datetime | None:
    times = [_time((p.get("status") or {}).get("startTime")) for p in pods]
    times = [t for t in times if t]
    return min(times) if times else None


def _kueue_stages(job: Job, obj: dict, wl: dict | None, pods: list[dict], pools) -> list:
    """What the cluster shows a job went through before it finished: created (queued),
    admitted by Kueue, pods started."""
    stages = [
        (S.QUEUED, _time(obj["metadata"].get("creationTimestamp")), "Created in the cluster.")
    ]
    admitted = _condition(wl or {}, "Admitted")
    if admitted and (admitted.get("status") == "True" or (wl.get("status") or {}).get("admission")):
        pool = _admitted_pool(wl, pools)
        stages.append((
            S.ADMITTED, _time(admitted.get("lastTransitionTime")),
            f"Admitted in pool {pool.name if pool else '?'}.",
        ))  # fmt: skip
    started = _pods_started(pods) or _time((obj.get("status") or {}).get("startTime"))
    if started and (admitted or pods):
        stages.append((S.RUNNING, started, "Pods are running."))
    return stages


def _differs(job: Job, name: str, value) -> bool:
    field = Job._meta.get_field(name)
    if field.is_relation:  # compare ids: the related row may not be loaded
        return getattr(job, field.attname) != (value.pk if value is not None else None)
    return getattr(job, name) != value


def _set(job: Job, **values) -> None:
    """Write plain fields that changed (no state change)."""
    changed = {k: v for k, v in values.items() if _differs(job, k, v)}
    if changed:
        Job.objects.filter(pk=job.pk).update(**changed)
        for k, v in changed.items():
            setattr(job, k, v)


def _note_retries(job: Job, obj: dict, pods: list[dict], now) -> None:
    """A failed worker the cluster runs again (within the job's retry limit) goes on the
    timeline, with its exit code, and the count on the job."""
    failed = int((obj.get("status") or {}).get("failed") or 0)
    rerun = min(failed, job.retry_limit)  # the failure past the limit ends the job instead
    if rerun <= job.retries:
        return
    codes = [
        str(state["terminated"].get("exitCode"))
        for pod in pods
        if (pod.get("status") or {}).get("phase") == "Failed"
        for state in [((pod["status"].get("containerStatuses") or [{}])[0].get("state") or {})]
        if state.get("terminated")
    ]
    exited = f" (exit code {codes[-1]})" if codes else ""
    for n in range(job.retries + 1, rerun + 1):
        JobTransition.objects.create(
            job=job, from_state=job.state, to_state=job.state, at=now,
            reason=f"A worker failed{exited}; the cluster runs it again (retry {n} of "
            f"{job.retry_limit}).",
        )  # fmt: skip
    _set(job, retries=rerun)


def _sync_kueue_job(job: Job, obj, wl, seen: Observed, pools, now) -> bool:
    if obj is None:
        return _maybe_lost(job, now)
    status = obj.get("status") or {}
    _note_retries(job, obj, seen.pods.get(job.pk, []), now)
    if _true(obj, "Complete") or _true(obj, "Failed"):
        # Whatever the sync missed on the way is recorded first, at the cluster's times.
        _catch_up(job, _kueue_stages(job, obj, wl, seen.pods.get(job.pk, []), pools))
    if done := _true(obj, "Complete"):
        return _move(
            job, S.SUCCEEDED, "All workers finished successfully.",
            at=_time(status.get("completionTime") or done.get("lastTransitionTime")),
            fields=_cleared(),
        )  # fmt: skip
    if failed := _true(obj, "Failed"):
        reason = _failure_text(job, failed, seen.pods.get(job.pk, []))
        return _move(
            job, S.FAILED, reason, at=_time(failed.get("lastTransitionTime")),
            fields={**_cleared(), "exit_reason": reason},
        )  # fmt: skip
    if wl is None:
        if job.state == S.SUBMITTED:
            return _move(job, S.QUEUED, "Waiting for Kueue to create the workload.")
        return False
    admitted = _true(wl, "Admitted")
    if admitted:
        pool = _admitted_pool(wl, pools)
        pod_running = any(
            (p.get("status") or {}).get("phase") == "Running" for p in seen.pods.get(job.pk, [])
        )
        fields = {**_cleared(), "admitted_pool": pool, "workload_name": wl["metadata"]["name"]}
        if pod_running or status.get("ready") or (status.get("active") and job.state == S.RUNNING):
            changed = False
            if job.state not in (S.ADMITTED, S.RUNNING):
                changed = _move(
                    job, S.ADMITTED, f"Admitted in pool {pool.name if pool else '?'}.",
                    at=_time(admitted.get("lastTransitionTime")), fields=fields,
                )  # fmt: skip
            start = _time(status.get("startTime")) or now
            return _move(job, S.RUNNING, "Pods are running.", at=start, fields=fields) or changed
        if job.state == S.RUNNING:
            return False
        return _move(
            job, S.ADMITTED, f"Admitted in pool {pool.name if pool else '?'}.",
            at=_time(admitted.get("lastTransitionTime")), fields=fields,
        )  # fmt: skip
    evicted = _true(wl, "Evicted")
    preempted = _true(wl, "Preempted")
    if evicted and (preempted or evicted.get("reason") == "Preempted"):
        message = (preempted or evicted).get("message", "")
        text = _preemption_text(job, message, (preempted or evicted).get("reason", ""))
        if job.state != S.PREEMPTED and job.state in (S.ADMITTED, S.RUNNING):
            return _move(
                job, S.PREEMPTED, text,
                at=_time((preempted or evicted).get("lastTransitionTime")),
                fields={"preemption_reason": text, "queue_position": None},
            )  # fmt: skip
    # Pending: record why, where in the queue, and when it might start.
    changed = False
    if job.state in (S.SUBMITTED, S.ADMITTED, S.RUNNING):
        suspended = job.idle_suspended_at is not None
        changed = _move(job, S.QUEUED, SUSPENDED_TEXT if suspended else "Waiting for admission.")
    reserved = _condition(wl, "QuotaReserved") or {}
    message = reserved.get("message", "") if reserved.get("status") != "True" else ""
    position = seen.positions.get((job.team.namespace, wl["metadata"]["name"]))
    # Why and until when, with the position, once every job is up to date (one write a job).
    seen.waiting.append(
        (job, message, {"queue_position": position, "workload_name": wl["metadata"]["name"]})
    )
    return changed


def _explain_waiting(waiting: list[tuple[Job, str, dict | None]], jobs: list[Job], now) -> None:
    """Why each waiting job waits and, on Kueue, its queue position and estimated start, written
    after the sync has recorded every admission, so the figures in the texts are this sync's.

    Jobs alike in team, pool, size and Kueue message wait for the same reason: it is computed
    once. The GPUs ahead of a job are those of its team's waiting jobs earlier in the team's
    queue; one estimator per team and pool reads the running jobs once, however many jobs wait.
    """
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
            _set(job, **values, pending_reason=SUSPENDED_TEXT, estimated_start=None,
                 estimate_basis="No estimate while the job is suspended.")  # fmt: skip
            continue
        if values is None:  # Volcano: no queue visible to place the job in
            _set(job, pending_reason=reasons[shape])
            continue
        if job.team.queue_hold_reason:  # nothing starts while the queue is held
            _set(job, **values, pending_reason=reasons[shape], estimated_start=None,
                 estimate_basis="No estimate while the team's queue is held.")  # fmt: skip
            continue
        where = (job.team_id, job.pool_id)
        if where not in estimators:
            pools = job_pools(team=job.team, pool=job.pool)
            estimators[where] = pools and start_estimator(team=job.team, pools=pools, now=now)
        estimate, basis = None, ""  # without a pool to wait in, nothing to estimate from
        if estimators[where]:
            ahead = 0
            if values["queue_position"] is not None:
                positions, before = ahead_by_team[job.team_id]
                ahead = before[bisect_left(positions, values["queue_position"])]
            estimate, basis = estimators[where](gpus=job.total_gpus, ahead=ahead)
        _set(job, **values, pending_reason=reasons[shape], estimated_start=estimate,
             estimate_basis=basis)  # fmt: skip


def _cleared() -> dict:
    return {"pending_reason": "", "queue_position": None, "estimated_start": None,
            "estimate_basis": ""}  # fmt: skip


def _maybe_lost(job: Job, now) -> bool:
    if job.state == S.SUBMITTED or job.applied_generation == 0:
        return False
    since = job.submitted_at or job.created_at
    if since and now - since < LOST_AFTER:
        return False
    text = "The job's objects disappeared from the cluster (deleted outside the portal?)."
    return _move(job, S.FAILED, text, fields={**_cleared(), "exit_reason": text})


def _admitted_pool(wl: dict, pools: dict):
    admission = (wl.get("status") or {}).get("admission") or {}
    for assignment in admission.get("podSetAssignments") or []:
        flavors = assignment.get("flavors") or {}
        flavor = flavors.get(GPU_RESOURCE) or next(
            (f for r, f in flavors.items() if r.startswith(MIG_RESOURCE_PREFIX)), None
        )
        if flavor and flavor in pools:
            return pools[flavor]
    return None


def _failure_text(job: Job, cond: dict, pods: list[dict]) -> str:
    reason = cond.get("reason", "")
    if reason == "DeadlineExceeded":
        return f"Stopped after its maximum runtime of {job.max_runtime_seconds} s."
    codes = []
    for pod in pods:
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            term = (cs.get("state") or {}).get("terminated") or {}
            if term.get("exitCode"):
                codes.append((pod["metadata"]["name"], term["exitCode"], term.get("reason", "")))
    retried = (
        f" It had been run again {job.retry_limit} time{'s' if job.retry_limit != 1 else ''}, "
        "the job's retry limit."
        if job.retry_limit and reason == "BackoffLimitExceeded"
        else ""
    )
    if codes:
        name, code, why = codes[-1]
        text = f"Worker {name} exited with code {code}" + (f" ({why})" if why else "") + "."
        return text + retried
    return f"The job failed: {cond.get('message') or reason or 'no reason given'}.{retried}"


def _preemption_text(job: Job, message: str, reason: str) -> str:
    """Who preempted the job and why, in words, from Kueue's eviction message."""
    why = {
        "InClusterQueue": "a higher-priority job of your own team needed the GPUs",
        "InCohortReclamation": "another team of the department reclaimed the GPUs it lent",
        "InCohortReclaimWhileBorrowing": "another team reclaimed quota while you were borrowing",
        "InCohortFairSharing": "your team borrowed more than its fair share of the department's "
        "idle GPUs for its weight, and a team below its share needed them",
    }.get(reason, "")
    if not why and (m := VIA_RE.search(message)):
        why = m.group(1)
    by = ""
    if m := PREEMPTOR_RE.search(message):
        ns, wl_name = m.group(1), m.group(2)
        other = (
            Job.objects.filter(team__namespace=ns, workload_name=wl_name)
            .select_related("team", "tier")
            .first()
        )
        if other is not None:
            by = (
                f"job “{other.name}” (#{other.pk}) of team {other.team.name}, "
                f"tier {other.tier.name}"
            )
            if other.team.department_id != job.team.department_id:  # through the organisation
                why = {
                    "InCohortReclamation": "a team of another department that shares with the "
                    "organisation reclaimed the GPUs it lent",
                    "InCohortFairSharing": "your department borrowed more than its fair share "
                    "of the organisation's idle GPUs for its weight, and a department below its "
                    "share needed them",
                }.get(reason, why)
        else:
            by = f"workload {ns}/{wl_name}"
    text = "Preempted"
    if by:
        text += f" by {by}"
    if why:
        text += f": {why}"
    return text + ". Kueue put it back in the queue; it restarts from the beginning when admitted."


def _sync_volcano_job(job: Job, obj, seen: Observed, now) -> bool:
    if obj is None:
        return _maybe_lost(job, now)
    phase = (((obj.get("status") or {}).get("state")) or {}).get("phase") or "Pending"
    if phase in ("Completed", "Failed", "Aborted", "Terminated"):
        started = _pods_started(seen.pods.get(job.pk, []))
        stages = [
            (S.QUEUED, _time(obj["metadata"].get("creationTimestamp")), "Created in the cluster.")
        ]
        if started:
            stages += [(S.ADMITTED, started, "The gang was scheduled."),
                       (S.RUNNING, started, "Pods are running.")]  # fmt: skip
        _catch_up(job, stages)
    if phase == "Completed":
        return _move(job, S.SUCCEEDED, "All workers finished successfully.", fields=_cleared())
    if phase in ("Failed", "Aborted", "Terminated"):
        text = f"Volcano ended the job ({phase})."
        return _move(job, S.FAILED, text, fields={**_cleared(), "exit_reason": text})
    if phase == "Running":
        changed = False
        if job.state not in (S.ADMITTED, S.RUNNING):
            changed = _move(job, S.ADMITTED, "The gang was scheduled.")
        return _move(job, S.RUNNING, "Pods are running.", fields=_cleared()) or changed
    if phase == "Restarting" and job.state in (S.ADMITTED, S.RUNNING):
        text = "Evicted: Volcano restarts the whole gang."
        return _move(job, S.PREEMPTED, text, fields={"preemption_reason": text})
    changed = False
    if job.state == S.SUBMITTED:
        changed = _move(job, S.QUEUED, "Waiting for the gang to be scheduled.")
    seen.waiting.append((job, "", None))  # why, once every job is up to date
    return changed


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
                if name == GPU_RESOURCE or name.startswith(MIG_RESOURCE_PREFIX):
                    gpus += int(str(limit))
        started = finished = exit_code = None
        for cs in status.get("containerStatuses") or []:
            state = cs.get("state") or {}
            if "running" in state:
                started = started or _time(state["running"].get("startedAt"))
            if "terminated" in state:
                term = state["terminated"]
                started = started or _time(term.get("startedAt"))
                finished = _time(term.get("finishedAt"))
                exit_code = term.get("exitCode")
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
            or (_time(status.get("startTime")) if phase == "Running" else None),
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
    """Sync every enabled cluster that has active jobs; one cluster's failure does not stop the
    rest. A cluster that did not answer lately is skipped until its breaker's next try (and
    then synced last), so a dead cluster costs the others nothing."""
    now = now or timezone.now()
    results = {}
    cluster_ids = (
        Job.objects.filter(state__in=ACTIVE_STATES, cluster__isnull=False)
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
        except kube.KubeError as exc:
            log.warning("job sync of %s failed: %s", cluster.name, exc)
            results[cluster.name] = {"error": str(exc)}
    return results
