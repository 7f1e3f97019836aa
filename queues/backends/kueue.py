"""Kueue as the portal's scheduler: a job is a suspended batch/v1 Job (Indexed with a headless
Service when it has several workers), a Kubeflow PyTorchJob or a JobSet, which Kueue admits as
one Workload (so every job is a gang); quota is ResourceFlavors, ClusterQueues in Cohorts and
LocalQueues. The portal observes the jobs, their Workloads and the visibility API's queue
positions; explains Kueue's preemptions and failures in words; suspends a job by making its
Workload inactive; and reads what each team holds from the admitted Workloads.
"""

from __future__ import annotations

import logging
import re
from collections import defaultdict

from django.core.exceptions import ValidationError
from kubernetes.utils import parse_quantity

from fleet import kube
from fleet.models import NodePool
from fleet.models.inventory import is_gpu_resource
from queues.backends.base import Backend, Observed
from queues.manifests.access import portal_access_manifests
from queues.manifests.common import GPU_RESOURCE, MANAGED_SELECTOR
from queues.manifests.guardrails import guardrail_manifests
from queues.manifests.jobs import (
    KIND_API_VERSIONS,
    KIND_GROUPS,
    PRIORITY_LABEL,
    headless_service,
    job_set,
    kueue_job,
    pytorch_job,
)
from queues.manifests.protection import protection_class_manifests, reclaim_policy
from queues.manifests.quotas import (
    OWNER_DEPARTMENT,
    OWNER_ORGANISATION,
    OWNER_POOL,
    OWNER_TEAM,
    OWNER_TIER,
    cluster_queue_manifest,
    cluster_queue_name,
    cohort_manifest,
    kueue_api_version,
    local_queue_manifest,
    member_queue_manifests,
    namespace_manifest,
    organisation_cohort_manifest,
    quotas_by_team,
    resource_flavor_manifest,
    topology_manifest,
    volume_objects,
    workload_priority_class_manifest,
)
from queues.models import Job, JobTransition, Team
from queues.services.jobs.recording import (
    SUSPENDED_TEXT,
    cluster_time,
    condition,
    condition_true,
    job_catch_up,
    job_fields_set,
    job_maybe_lost,
    job_move,
    pods_started,
    waiting_cleared,
)

log = logging.getLogger(__name__)
S = Job.State

VISIBILITY = "/apis/visibility.kueue.x-k8s.io/{version}/clusterqueues/{cq}/pendingworkloads"
# Kueue names the preemptor in its eviction message by its Workload's and its job's UIDs, and
# the cohort path of its ClusterQueue: "(UID: <uid>, JobUID: <uid>) ...; preemptor path: /c/cq".
PREEMPTOR_JOB_UID_RE = re.compile(r"JobUID: ([0-9a-fA-F-]{36})")
PREEMPTOR_PATH_RE = re.compile(r"preemptor path: (\S+?);")
VIA_RE = re.compile(r"due to ([^;]+);")
# What PyTorchJob and JobSet conditions mean in batch Job terms.
_DONE = {"PyTorchJob": {"Succeeded": "Complete", "Failed": "Failed"},
         "JobSet": {"Completed": "Complete", "Failed": "Failed"}}  # fmt: skip


class KueueBackend(Backend):
    name = "kueue"
    job_kinds = (Job.Kind.JOB, Job.Kind.PYTORCHJOB, Job.Kind.JOBSET)
    gang_optional = False  # Kueue admits a Workload whole or not at all
    retries_per_job = True  # the batch Job's backoffLimit
    member_queues = True
    priority_protection = True

    def job_objects(self, job, *, name=None, pull_secrets=()) -> list[dict]:
        if job.kind == "pytorchjob":
            return [pytorch_job(job, name=name, pull_secrets=pull_secrets)]
        if job.kind == "jobset":
            return [job_set(job, name=name, pull_secrets=pull_secrets)]
        objects = []
        if job.workers > 1:
            objects.append(headless_service(job, name=name))
        objects.append(kueue_job(job, name=name, pull_secrets=pull_secrets))
        return objects

    def cluster_objects(
        self, *, cluster, pools, departments, teams, tiers, quotas, sizes=None, volumes=(),
        members=None,
    ) -> list[tuple]:  # fmt: skip
        cluster_quotas, team_quotas = quotas_by_team(cluster, quotas)
        out: list[tuple] = []
        version = cluster.kueue_api_version or "v1beta2"
        tiers = list(tiers)
        reclaim = reclaim_policy(tiers)
        for pool in pools:
            if pool.topology_levels:
                out.append((OWNER_POOL, pool.pk, topology_manifest(pool, api_version=version)))
            out.append((OWNER_POOL, pool.pk, resource_flavor_manifest(pool, api_version=version)))
        if any(department.shares_with_organisation for department in departments):
            out.append((OWNER_ORGANISATION, 0, organisation_cohort_manifest(api_version=version)))
        for department in departments:
            out.append(
                (OWNER_DEPARTMENT, department.pk, cohort_manifest(department, api_version=version))
            )
        for team in teams:
            out.append((OWNER_TEAM, team.pk, namespace_manifest(team)))
            out.extend((OWNER_TEAM, team.pk, m) for m in guardrail_manifests(team, cluster_quotas))
            out.extend((OWNER_TEAM, team.pk, m) for m in portal_access_manifests(team))
            cq = cluster_queue_manifest(
                team, team_quotas[team.pk], api_version=version, sizes=sizes, reclaim=reclaim
            )
            out.append((OWNER_TEAM, team.pk, cq))
            out.append((OWNER_TEAM, team.pk, local_queue_manifest(team, api_version=version)))
            for lq in member_queue_manifests(
                team, (members or {}).get(team.pk, ()), api_version=version
            ):
                out.append((OWNER_TEAM, team.pk, lq))
        for tier in tiers:
            out.append(
                (OWNER_TIER, tier.pk, workload_priority_class_manifest(tier, api_version=version))
            )
            out.extend(
                (OWNER_TIER, tier.pk, m)
                for m in protection_class_manifests(tier, tiers, api_version=version)
            )
        out.extend(volume_objects(cluster, volumes))
        return out

    def watched_kinds(self, cluster) -> list[tuple[str, str, str | None]]:
        return [
            ("batch/v1", "Job", MANAGED_SELECTOR),
            (kueue_api_version(cluster), "Workload", None),
        ]

    def observe(self, *, cluster, client, seen: Observed, teams_pending=(), kinds=("job",)):
        """The jobs of each kind (PyTorchJobs and JobSets seen as batch Jobs: `job_view`),
        every Workload by the job that owns it, and the queue positions of the teams' pending
        Workloads from the visibility API."""
        lists = [(KIND_API_VERSIONS[k], KIND_GROUPS[k][1]) for k in sorted(set(kinds) | {"job"})]
        for api_version, kind in lists:
            for obj in client.list(api_version, kind, label_selector=MANAGED_SELECTOR):
                meta = obj["metadata"]
                seen.jobs[(meta["namespace"], meta["name"])] = job_view(obj)
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

    def sync_job(self, job, *, obj, seen: Observed, pools, now) -> bool:
        wl = seen.workloads.get((job.team.namespace, job.k8s_name))
        return _sync_job(job, obj, wl, seen, pools, now)

    def quota_held(self, *, cluster, client) -> dict[tuple[int, int], int]:
        """What the admitted Workloads hold (held_by_team_and_pool)."""
        workloads = list(client.list(kueue_api_version(cluster), "Workload"))
        return held_by_team_and_pool(workloads, cluster=cluster)

    def job_set_priority_class(self, job, name: str) -> None:
        """Move a job's object to another WorkloadPriorityClass: Kueue (0.15 and later) gives
        its Workload that class's priority, admitted or not, without stopping it."""
        api_version, kind = KIND_API_VERSIONS[job.kind], KIND_GROUPS[job.kind][1]
        client = kube.client_for(job.cluster)
        patch = {"metadata": {"labels": {PRIORITY_LABEL: name}}}
        client.patch(api_version, kind, job.k8s_name, patch, namespace=job.team.namespace)

    def job_set_active(self, job, active: bool) -> None:
        """Kueue keeps an inactive Workload (`spec.active: false`) evicted: its pods stop, its
        quota goes back to the queue, until it is active again and admitted as any other."""
        client = kube.client_for(job.cluster)
        name = _workload_name(job, client)
        client.patch(
            kueue_api_version(job.cluster),
            "Workload",
            name,
            {"spec": {"active": active}},
            namespace=job.team.namespace,
        )


def job_view(obj: dict) -> dict:
    """A PyTorchJob or JobSet as a batch/v1 Job's status reads (Complete/Failed conditions,
    start and completion times, active, ready and failed counts); a Job as it is."""
    kind = obj.get("kind")
    if kind not in _DONE:
        return obj
    status = obj.get("status") or {}
    conditions = [
        {**c, "type": _DONE[kind][c["type"]], "reason": _pytorch_reason(c) or c.get("reason", "")}
        if kind == "PyTorchJob"
        else {**c, "type": _DONE[kind][c["type"]]}
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


def _pytorch_reason(cond: dict) -> str:
    """A PyTorchJob's Failed condition as a batch Job's reason: the training operator gives
    every failure one reason (PyTorchJobFailed) and says in the message which limit it met."""
    if cond.get("type") != "Failed":
        return ""
    message = cond.get("message") or ""
    if "backoff limit" in message:
        return "BackoffLimitExceeded"
    if "deadline" in message:
        return "DeadlineExceeded"
    return ""


def _workload_name(job: Job, client) -> str:
    """The job's Workload: as the sync recorded it, else found by its owner reference."""
    if job.workload_name:
        return job.workload_name
    for wl in client.list(kueue_api_version(job.cluster), "Workload", namespace=job.team.namespace):
        owners = wl["metadata"].get("ownerReferences") or []
        if any(o.get("name") == job.k8s_name for o in owners):
            return wl["metadata"]["name"]
    raise ValidationError("The job has no workload in the cluster yet.")


def _kueue_stages(job: Job, obj: dict, wl: dict | None, pods: list[dict], pools) -> list:
    """What the cluster shows a job went through before it finished: created (queued),
    admitted by Kueue, pods started."""
    stages = [
        (
            S.QUEUED,
            cluster_time(obj["metadata"].get("creationTimestamp")),
            "Created in the cluster.",
        )
    ]
    admitted = condition(wl or {}, "Admitted")
    if admitted and (admitted.get("status") == "True" or (wl.get("status") or {}).get("admission")):
        pool = _admitted_pool(wl, pools)
        stages.append((
            S.ADMITTED, cluster_time(admitted.get("lastTransitionTime")),
            f"Admitted in pool {pool.name if pool else '?'}.",
        ))  # fmt: skip
    started = pods_started(pods) or cluster_time((obj.get("status") or {}).get("startTime"))
    if started and (admitted or pods):
        stages.append((S.RUNNING, started, "Pods are running."))
    return stages


def _exit_codes(pods: list[dict]) -> list[tuple[str, int, str]]:
    """(pod, exit code, reason) of the failed runs the pods show: a container that ended, and
    one restarted in place (its last state). A pod being deleted shows only its last state: its
    current one is the stop (SIGTERM, 143) of whoever deleted it, not a failure of its own."""
    codes = []
    for pod in pods:
        name = pod["metadata"]["name"]
        deleted = bool(pod["metadata"].get("deletionTimestamp"))
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            states = [cs.get("lastState") or {}] if deleted else [cs.get("lastState") or {},
                                                                 cs.get("state") or {}]  # fmt: skip
            for state in states:
                term = state.get("terminated") or {}
                if term.get("exitCode"):
                    codes.append((name, term["exitCode"], term.get("reason", "")))
    return codes


def _failures(job: Job, obj: dict, pods: list[dict]) -> int:
    """Failed runs of the job's workers so far: failed pods, or for a PyTorchJob (whose failed
    containers restart in place) the restarts of its pods' containers."""
    failed = int((obj.get("status") or {}).get("failed") or 0)
    if job.kind == Job.Kind.PYTORCHJOB:
        restarts = sum(
            int(cs.get("restartCount") or 0)
            for pod in pods
            for cs in (pod.get("status") or {}).get("containerStatuses") or []
        )
        failed = max(failed, restarts)
    return failed


def _note_retries(job: Job, obj: dict, pods: list[dict], now) -> None:
    """A failed worker the cluster runs again (within the job's retry limit) goes on the
    timeline, with its exit code, and the count on the job."""
    rerun = min(_failures(job, obj, pods), job.retry_limit)  # past the limit the job ends
    if rerun <= job.retries:
        return
    codes = [str(code) for _, code, _ in _exit_codes(pods)]
    exited = f" (exit code {codes[-1]})" if codes else ""
    for n in range(job.retries + 1, rerun + 1):
        JobTransition.objects.create(
            job=job, from_state=job.state, to_state=job.state, at=now,
            reason=f"A worker failed{exited}; the cluster runs it again (retry {n} of "
            f"{job.retry_limit}).",
        )  # fmt: skip
    job_fields_set(job, retries=rerun)


def _sync_job(job: Job, obj, wl, seen: Observed, pools, now) -> bool:
    if obj is None:
        return job_maybe_lost(job, now)
    status = obj.get("status") or {}
    _note_retries(job, obj, seen.pods.get(job.pk, []), now)
    if condition_true(obj, "Complete") or condition_true(obj, "Failed"):
        # Whatever the sync missed on the way is recorded first, at the cluster's times.
        job_catch_up(job, _kueue_stages(job, obj, wl, seen.pods.get(job.pk, []), pools))
    if done := condition_true(obj, "Complete"):
        return job_move(
            job, S.SUCCEEDED, "All workers finished successfully.",
            at=cluster_time(status.get("completionTime") or done.get("lastTransitionTime")),
            fields=waiting_cleared(),
        )  # fmt: skip
    if failed := condition_true(obj, "Failed"):
        reason = _failure_text(job, failed, seen.pods.get(job.pk, []))
        return job_move(
            job, S.FAILED, reason, at=cluster_time(failed.get("lastTransitionTime")),
            fields={**waiting_cleared(), "exit_reason": reason},
        )  # fmt: skip
    if wl is None:
        if job.state == S.SUBMITTED:
            return job_move(job, S.QUEUED, "Waiting for Kueue to create the workload.")
        return False
    missed = _record_missed_preemption(job, wl, seen)
    return _sync_workload(job, obj, wl, seen, pools, now) or missed


def _sync_workload(job: Job, obj: dict, wl: dict, seen: Observed, pools, now) -> bool:
    """The job's state from its Workload: admitted (and running), preempted, or pending."""
    status = obj.get("status") or {}
    admitted = condition_true(wl, "Admitted")
    if admitted:
        pool = _admitted_pool(wl, pools)
        pod_running = any(
            (p.get("status") or {}).get("phase") == "Running" for p in seen.pods.get(job.pk, [])
        )
        fields = {
            **waiting_cleared(),
            "admitted_pool": pool,
            "workload_name": wl["metadata"]["name"],
        }
        if pod_running or status.get("ready") or (status.get("active") and job.state == S.RUNNING):
            changed = False
            if job.state not in (S.ADMITTED, S.RUNNING):
                changed = job_move(
                    job, S.ADMITTED, f"Admitted in pool {pool.name if pool else '?'}.",
                    at=cluster_time(admitted.get("lastTransitionTime")), fields=fields,
                )  # fmt: skip
            start = cluster_time(status.get("startTime")) or now
            return job_move(job, S.RUNNING, "Pods are running.", at=start, fields=fields) or changed
        if job.state == S.RUNNING:
            return False
        return job_move(
            job, S.ADMITTED, f"Admitted in pool {pool.name if pool else '?'}.",
            at=cluster_time(admitted.get("lastTransitionTime")), fields=fields,
        )  # fmt: skip
    evicted = condition_true(wl, "Evicted")
    preempted = condition_true(wl, "Preempted")
    counted = preemptions_counted(wl)
    if evicted and (preempted or evicted.get("reason") == "Preempted"):
        message = (preempted or evicted).get("message", "")
        text = _preemption_text(job, message, (preempted or evicted).get("reason", ""))
        # Without Kueue's count, only a job seen running can have been preempted since.
        new = job.state in (S.ADMITTED, S.RUNNING) if counted is None else counted > job.preemptions
        if job.state != S.PREEMPTED and new:
            return job_move(
                job, S.PREEMPTED, text,
                at=cluster_time((preempted or evicted).get("lastTransitionTime")),
                fields={"preemption_reason": text, "queue_position": None,
                        "preemptions": max(counted or 0, job.preemptions + 1)},
            )  # fmt: skip
    # Pending: record why, where in the queue, and when it might start.
    changed = False
    if job.state in (S.SUBMITTED, S.ADMITTED, S.RUNNING):
        suspended = job.idle_suspended_at is not None
        changed = job_move(job, S.QUEUED, SUSPENDED_TEXT if suspended else "Waiting for admission.")
    reserved = condition(wl, "QuotaReserved") or {}
    message = reserved.get("message", "") if reserved.get("status") != "True" else ""
    position = seen.positions.get((job.team.namespace, wl["metadata"]["name"]))
    # Why and until when, with the position, once every job is up to date (one write a job).
    seen.waiting.append(
        (job, message, {"queue_position": position, "workload_name": wl["metadata"]["name"]})
    )
    return changed


def preemptions_counted(wl: dict) -> int | None:
    """How many times Kueue preempted the workload (its schedulingStats' evictions with reason
    Preempted), or None from a Kueue that does not count them."""
    evictions = ((wl.get("status") or {}).get("schedulingStats") or {}).get("evictions")
    if evictions is None:
        return None
    return sum(int(e.get("count") or 0) for e in evictions if e.get("reason") == "Preempted")


def _record_missed_preemption(job: Job, wl: dict, seen: Observed) -> bool:
    """A preemption that happened between two syncs, the workload admitted (or queued) again
    since, so its Evicted and Preempted conditions no longer say so: Kueue's count says it was
    preempted more often than the job's history records. Record it, at the time and with the
    words of Kueue's Preempted event on the workload where the cluster still has it."""
    counted = preemptions_counted(wl)
    if counted is None or counted <= job.preemptions or condition_true(wl, "Evicted"):
        return False
    event = _last_preempted_event(wl, seen)
    message = (event or {}).get("message", "")
    cause = next(
        (e.get("underlyingCause", "") for e in reversed(
            ((wl.get("status") or {}).get("schedulingStats") or {}).get("evictions") or [])
         if e.get("reason") == "Preempted"), "",
    )  # fmt: skip
    text = _preemption_text(job, message, cause)
    missed = counted - job.preemptions
    if missed > 1:
        text += f" (Kueue preempted it {missed} times since the portal last looked.)"
    at = cluster_time((event or {}).get("lastTimestamp") or (event or {}).get("eventTime"))
    fields = {"preemption_reason": text, "preemptions": counted}
    if job.state == S.PREEMPTED:
        job_fields_set(job, **fields)
        return False
    return job_move(job, S.PREEMPTED, text, at=at, fields=fields)


def _last_preempted_event(wl: dict, seen: Observed) -> dict | None:
    if seen.events_of is None:
        return None
    meta = wl.get("metadata") or {}
    found = [
        e for e in seen.events_of(meta.get("namespace", ""))
        if e.get("reason") == "Preempted"
        and (e.get("involvedObject") or {}).get("name") == meta.get("name")
    ]  # fmt: skip
    return max(found, key=lambda e: e.get("lastTimestamp") or "", default=None)


def _admitted_pool(wl: dict, pools: dict):
    admission = (wl.get("status") or {}).get("admission") or {}
    for assignment in admission.get("podSetAssignments") or []:
        flavors = assignment.get("flavors") or {}
        flavor = flavors.get(GPU_RESOURCE) or next(
            (f for r, f in flavors.items() if is_gpu_resource(r)), None
        )
        if flavor and flavor in pools:
            return pools[flavor]
    return None


def _failure_text(job: Job, cond: dict, pods: list[dict]) -> str:
    reason = cond.get("reason", "")
    if reason == "DeadlineExceeded":
        return f"Stopped after its maximum runtime of {job.max_runtime_seconds} s."
    retried = ""
    if job.retry_limit and reason == "BackoffLimitExceeded":
        limit = job.retry_limit
        retried = (
            f" It had been run again {limit} time{'s' if limit != 1 else ''}, the job's retry "
            "limit."
            if job.retries >= limit
            # Workers that fail together count one failure each, and the limit counts them all.
            else f" Its workers failed more times than its retry limit of {limit} allows "
            "(workers that fail together count one failure each)."
        )
    if job.retry_limit and reason == "ReachedMaxRestarts":  # a JobSet's restarts of the set
        limit = job.retry_limit
        retried = (
            f" Its workers had been restarted together {limit} time{'s' if limit != 1 else ''}, "
            "the job's retry limit."
        )
    if codes := _exit_codes(pods):
        name, code, why = codes[-1]
        text = f"Worker {name} exited with code {code}" + (f" ({why})" if why else "") + "."
        return text + retried
    if retried:  # its pods are gone; the timeline has each failure's exit code
        return "A worker failed again." + retried
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
    other = None
    if m := PREEMPTOR_JOB_UID_RE.search(message):
        other = Job.objects.filter(k8s_uid=m.group(1)).select_related("team", "tier").first()
    if other is not None:
        by = f"job “{other.name}” (#{other.pk}) of team {other.team.name}, tier {other.tier.name}"
        if other.team.department_id != job.team.department_id:  # through the organisation
            why = {
                "InCohortReclamation": "a team of another department that shares with the "
                "organisation reclaimed the GPUs it lent",
                "InCohortFairSharing": "your department borrowed more than its fair share of the "
                "organisation's idle GPUs for its weight, and a department below its share "
                "needed them",
            }.get(reason, why)
    elif m := PREEMPTOR_PATH_RE.search(message):
        by = f"a workload of ClusterQueue {m.group(1).rsplit('/', 1)[-1]}"
    text = "Preempted"
    if by:
        text += f" by {by}"
    if why:
        text += f": {why}"
    return text + ". Kueue put it back in the queue; it restarts from the beginning when admitted."


def held_by_queue(workloads: list[dict], resources: dict[str, str]) -> dict[tuple, int]:
    """(ClusterQueue, flavor) → units of the flavor's GPU resource held by admitted workloads.

    `resources` maps a flavor (pool) name to the resource that counts its GPUs."""
    held: dict[tuple, int] = defaultdict(int)
    for wl in workloads:
        if not condition_true(wl, "QuotaReserved") or condition_true(wl, "Finished"):
            continue
        admission = (wl.get("status") or {}).get("admission") or {}
        cq = admission.get("clusterQueue")
        for psa in admission.get("podSetAssignments") or []:
            usage = psa.get("resourceUsage") or {}
            for resource, flavor in (psa.get("flavors") or {}).items():
                if resources.get(flavor) != resource:
                    continue
                try:
                    held[(cq, flavor)] += int(parse_quantity(usage.get(resource, 0)))
                except (ValueError, TypeError, ArithmeticError):
                    log.warning("ledger: unreadable %s usage %r", resource, usage.get(resource))
    return held


def held_by_team_and_pool(workloads: list[dict], *, cluster) -> dict[tuple[int, int], int]:
    """(team id, pool id) -> units of the pool's GPU resource the team's admitted Workloads hold
    in the cluster (held_by_queue, by ClusterQueue and flavor, read back to teams and pools)."""
    teams = {cluster_queue_name(t): t.pk for t in Team.objects.all()}
    pools = {p.name: p for p in NodePool.objects.filter(cluster=cluster)}
    held = held_by_queue(workloads, {n: p.gpu_resource for n, p in pools.items()})
    return {
        (teams[cq], pools[flavor].pk): units
        for (cq, flavor), units in held.items()
        if cq in teams and flavor in pools
    }
