"""Volcano as the portal's scheduler: a job is a batch.volcano.sh/v1alpha1 Job whose
minAvailable is its gang; quota is a Queue hierarchy (the department's, the team's, and one leaf
Queue per team and pool), and a job waits in the leaf Queue of its pool. The portal observes the
vcjobs' phases, and reads what each team holds from what its leaf Queues have allocated.
"""

from __future__ import annotations

import logging
from collections import defaultdict

from django.core.exceptions import ValidationError
from kubernetes.utils import parse_quantity

from fleet import kube
from queues.backends.base import Backend, Observed
from queues.manifests.access import portal_access_manifests
from queues.manifests.common import MANAGED_SELECTOR
from queues.manifests.guardrails import guardrail_manifests
from queues.manifests.jobs import volcano_job
from queues.manifests.quotas import (
    OWNER_DEPARTMENT,
    OWNER_TEAM,
    OWNER_TIER,
    VOLCANO_QUEUE_API,
    namespace_manifest,
    priority_class_manifest,
    quotas_by_team,
    volcano_department_queue_manifest,
    volcano_pool_queue_manifest,
    volcano_pool_queue_name,
    volcano_team_queue_manifest,
    volume_objects,
)
from queues.models import Job, Quota
from queues.selectors.jobs import job_volcano_pool
from queues.selectors.volcano_queue import queue_places, volcano_start_estimator
from queues.services.jobs.recording import (
    cluster_time,
    job_catch_up,
    job_maybe_lost,
    job_move,
    pods_started,
    waiting_cleared,
)

log = logging.getLogger(__name__)
S = Job.State

VOLCANO_JOB_API = "batch.volcano.sh/v1alpha1"
PODGROUP_API = "scheduling.volcano.sh/v1beta1"


class VolcanoBackend(Backend):
    name = "volcano"
    job_kinds = (Job.Kind.JOB,)  # PyTorchJob and JobSet go through Kueue
    gang_optional = True  # minAvailable below the workers lets some start first
    retries_per_job = False  # Volcano restarts the whole gang
    member_queues = False

    def pool_for_any_pool(self, *, team, cluster_id: int, gpus: int):
        """A Volcano job waits in one pool's queue (that pool's limit): the pool is picked when
        it is submitted (job_volcano_pool)."""
        return job_volcano_pool(team=team, cluster_id=cluster_id, gpus=gpus)

    def job_objects(self, job, *, name=None, pull_secrets=()) -> list[dict]:
        return [volcano_job(job, name=name, pull_secrets=pull_secrets)]

    def cluster_objects(
        self, *, cluster, pools, departments, teams, tiers, quotas, sizes=None, volumes=(),
        members=None,
    ) -> list[tuple]:  # fmt: skip
        cluster_quotas, team_quotas = quotas_by_team(cluster, quotas)
        out: list[tuple] = []
        by_department: dict[int, dict] = defaultdict(dict)
        for team in teams:
            by_department[team.department_id][team.pk] = team_quotas[team.pk]
        for department in departments:
            manifest = volcano_department_queue_manifest(department, by_department[department.pk])
            out.append((OWNER_DEPARTMENT, department.pk, manifest))
        for team in teams:
            quotas = sorted(team_quotas[team.pk], key=lambda q: q.pool.name)
            out.append((OWNER_TEAM, team.pk, namespace_manifest(team)))
            out.extend((OWNER_TEAM, team.pk, m) for m in guardrail_manifests(team, cluster_quotas))
            out.extend((OWNER_TEAM, team.pk, m) for m in portal_access_manifests(team))
            out.append((OWNER_TEAM, team.pk, volcano_team_queue_manifest(team, quotas)))
            for quota in quotas:
                out.append((OWNER_TEAM, team.pk, volcano_pool_queue_manifest(team, quota)))
        for tier in tiers:
            out.append((OWNER_TIER, tier.pk, priority_class_manifest(tier)))
        out.extend(volume_objects(cluster, volumes))
        return out

    def watched_kinds(self, cluster) -> list[tuple[str, str, str | None]]:
        return [(VOLCANO_JOB_API, "Job", MANAGED_SELECTOR)]

    def observe(self, *, cluster, client, seen: Observed, teams_pending=(), kinds=("job",)):
        """The vcjobs and, when teams have jobs waiting, where each waits in its queue: Volcano
        shows no positions, so they are worked out from the PodGroups in Volcano's order
        (queue_places)."""
        for obj in client.list(VOLCANO_JOB_API, "Job", label_selector=MANAGED_SELECTOR):
            meta = obj["metadata"]
            seen.jobs[(meta["namespace"], meta["name"])] = obj
        if not teams_pending:
            return
        try:
            podgroups = client.list(PODGROUP_API, "PodGroup")
            priorities = {
                (pc.get("metadata") or {}).get("name", ""): int(pc.get("value") or 0)
                for pc in client.list("scheduling.k8s.io/v1", "PriorityClass")
            }
        except kube.KubeError as exc:
            log.info("podgroups of %s not read: %s", cluster.name, exc)
            return
        for key, place in queue_places(podgroups, priorities).items():
            seen.positions[key] = place.position
            seen.gpus_ahead[key] = place.gpus_ahead

    def sync_job(self, job, *, obj, seen: Observed, pools, now) -> bool:
        return _sync_job(job, obj, seen, now)

    def quota_held(self, *, cluster, client) -> dict[tuple[int, int], int]:
        """What each team's leaf queue has allocated (held_by_volcano_queue)."""
        quotas = Quota.objects.filter(pool__cluster=cluster).select_related("team", "pool")
        queues = {
            (q.team_id, q.pool_id): client.get(
                VOLCANO_QUEUE_API, "Queue", volcano_pool_queue_name(q.team, q.pool)
            )
            for q in quotas
        }
        resources = {q.pool_id: q.pool.gpu_resource for q in quotas}
        return held_by_volcano_queue(queues, resources)

    def start_estimator(self, *, team, pools, now):
        """Volcano's enqueue rule played forward (volcano_start_estimator)."""
        return volcano_start_estimator(team=team, pools=pools, now=now)

    def job_set_active(self, job, active: bool) -> None:
        raise ValidationError("Only jobs queued by Kueue can be suspended.")


def _sync_job(job: Job, obj, seen: Observed, now) -> bool:
    if obj is None:
        return job_maybe_lost(job, now)
    phase = (((obj.get("status") or {}).get("state")) or {}).get("phase") or "Pending"
    if phase in ("Completed", "Failed", "Aborted", "Terminated"):
        started = pods_started(seen.pods.get(job.pk, []))
        stages = [
            (
                S.QUEUED,
                cluster_time(obj["metadata"].get("creationTimestamp")),
                "Created in the cluster.",
            )
        ]
        if started:
            stages += [(S.ADMITTED, started, "The gang was scheduled."),
                       (S.RUNNING, started, "Pods are running.")]  # fmt: skip
        job_catch_up(job, stages)
    if phase == "Completed":
        return job_move(
            job, S.SUCCEEDED, "All workers finished successfully.", fields=waiting_cleared()
        )
    if phase in ("Failed", "Aborted", "Terminated"):
        text = f"Volcano ended the job ({phase})."
        return job_move(job, S.FAILED, text, fields={**waiting_cleared(), "exit_reason": text})
    if phase == "Running":
        changed = False
        if job.state not in (S.ADMITTED, S.RUNNING):
            changed = job_move(job, S.ADMITTED, "The gang was scheduled.")
        return job_move(job, S.RUNNING, "Pods are running.", fields=waiting_cleared()) or changed
    if phase == "Restarting" and job.state in (S.ADMITTED, S.RUNNING):
        text = "Evicted: Volcano restarts the whole gang."
        return job_move(job, S.PREEMPTED, text, fields={"preemption_reason": text})
    changed = False
    if job.state == S.SUBMITTED:
        changed = job_move(job, S.QUEUED, "Waiting for the gang to be scheduled.")
    # Why, where in its queue and until when, once every job is up to date.
    position = seen.positions.get((job.team.namespace, job.k8s_name))
    seen.waiting.append((job, "", {"queue_position": position}))
    return changed


def held_by_volcano_queue(queues: dict[tuple, dict | None], resources: dict[int, str]) -> dict:
    """(team id, pool id) → units of the pool's GPU resource its Volcano leaf queue has
    allocated. `queues`: the leaf queue objects by (team id, pool id) (None: not found);
    `resources`: the resource that counts each pool's GPUs."""
    held = {}
    for (team_id, pool_id), queue in queues.items():
        allocated = ((queue or {}).get("status") or {}).get("allocated") or {}
        value = allocated.get(resources.get(pool_id, ""))
        if value is None:
            continue
        try:
            units = int(parse_quantity(value))
        except (ValueError, TypeError, ArithmeticError):
            log.warning("ledger: unreadable allocation %r of a Volcano queue", value)
            continue
        if units:
            held[(team_id, pool_id)] = units
    return held
