"""Submitting jobs: validate, policy, admissibility; approve, reject and resubmit; and the
approval policy."""

from __future__ import annotations

import hashlib
import json
import re

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from core.errors import IdempotencyKeyReused
from core.roles import is_platform_admin
from core.text import count
from fleet.quantities import cpu_text, memory_text
from queues.backends import backend_of
from queues.manifests.jobs import job_k8s_name
from queues.manifests.quotas import member_queue_name
from queues.models import ApprovalPolicy, Job, JobTransition, Team
from queues.selectors.approvers import job_approvers
from queues.selectors.jobs import (
    approval_policy_for_tier,
    job_capacity_problem,
    job_cluster_id,
    team_pool_limits,
)
from queues.selectors.tenancy import team_role
from queues.services.audit import audit
from queues.services.jobs.apply import jobs_apply_request
from queues.services.jobs.lifecycle import job_notify_enqueue, job_transition
from queues.validators.jobs import job_validate

S = Job.State


def approval_policy_get() -> ApprovalPolicy:
    """The one approval policy row (created empty: nothing needs approval)."""
    policy = ApprovalPolicy.objects.prefetch_related("tiers_needing_approval").first()
    if policy is None:
        policy = ApprovalPolicy.objects.create()
    return policy


def approval_reasons(*, policy: ApprovalPolicy | None, tier_held: bool, values: dict) -> list[str]:
    """Why a job with these values waits for its lead (empty: it does not). `tier_held` says
    whether the policy holds the job's tier; no policy means nothing needs approval."""
    if policy is None:
        return []
    reasons = []
    tier = values["tier"]
    if tier_held:
        reasons.append(f"tier {tier.name} needs approval")
    gpus = values["workers"] * values["gpus_per_worker"]
    if policy.max_gpus_without_approval is not None and gpus > policy.max_gpus_without_approval:
        reasons.append(f"{count(gpus, 'GPU')} is more than {policy.max_gpus_without_approval}")
    limit = policy.max_runtime_seconds_without_approval
    if limit is not None and values["max_runtime_seconds"] > limit:
        reasons.append(f"a maximum runtime of {values['max_runtime_seconds']} s is over {limit} s")
    return reasons


POLICY_LIMITS = ("max_gpus_without_approval", "max_runtime_seconds_without_approval")
REGISTRY_RE = re.compile(
    r"(localhost|[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+)(:[0-9]{1,5})?"
)


def image_registry(image: str) -> str:
    """The registry an image reference pulls from ("docker.io" when it names none)."""
    first, _, rest = image.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return first.lower()
    return "docker.io"


def registry_problem(*, image: str, policy: ApprovalPolicy | None) -> str:
    """Why the image may not be used under the policy's registry allow-list ("" when it may)."""
    allowed = list(getattr(policy, "allowed_registries", None) or [])
    registry = image_registry(image)
    if not allowed or registry in allowed:
        return ""
    return (
        f"Images come from the allowed registries only ({', '.join(allowed)}); this one is from "
        f"{registry}. Push it to one of them, or ask a platform admin to allow {registry}."
    )


def approval_policy_update(*, actor, **changes) -> ApprovalPolicy:
    """Change the named parts of the approval policy (platform admins only): `tiers` (the tiers
    that need approval) and the limits of POLICY_LIMITS (None: no limit). What is not named
    stays as it is. Audited with before and after."""
    if not is_platform_admin(actor):
        raise PermissionDenied("Only platform admins edit the approval policy.")
    unknown = set(changes) - {"tiers", "allowed_registries", *POLICY_LIMITS}
    if unknown:
        raise ValidationError(f"Unknown approval policy fields: {', '.join(sorted(unknown))}.")
    with transaction.atomic():
        policy = approval_policy_get()
        policy = ApprovalPolicy.objects.select_for_update().get(pk=policy.pk)
        before = _policy_values(policy)
        for name in POLICY_LIMITS:
            if name in changes:
                setattr(policy, name, changes[name])
        if "allowed_registries" in changes:
            policy.allowed_registries = _clean_registries(changes["allowed_registries"])
        policy.save()
        if "tiers" in changes:
            policy.tiers_needing_approval.set(changes["tiers"] or [])
        audit(
            actor=actor,
            verb="approval_policy.update",
            obj=policy,
            before=before,
            after=_policy_values(policy),
        )
    return policy


def _clean_registries(values) -> list[str]:
    cleaned = []
    for value in values or []:
        value = str(value).strip().lower()
        if not REGISTRY_RE.fullmatch(value):
            raise ValidationError(
                {"allowed_registries": f"{value!r} is not a registry host, e.g. ghcr.io or "
                 "registry.example.org:5000 (docker.io for Docker Hub)."}
            )  # fmt: skip
        if value not in cleaned:
            cleaned.append(value)
    return cleaned


def _policy_values(policy: ApprovalPolicy) -> dict:
    return {
        "allowed_registries": list(policy.allowed_registries),
        "tiers_needing_approval": sorted(t.name for t in policy.tiers_needing_approval.all()),
        "max_gpus_without_approval": policy.max_gpus_without_approval,
        "max_runtime_seconds_without_approval": policy.max_runtime_seconds_without_approval,
    }


def _require_member(user, team):
    # A team read by user_job_teams for this user carries the membership it was found through.
    if getattr(team, "member_user_id", None) == user.pk and team.member_role:
        return
    if team_role(user=user, team=team) is None:
        raise PermissionDenied("Only members of the team can submit its jobs.")


def job_submit(
    *, user, team: Team, resubmitted_from: Job | None = None, idempotency_key: str = "", **spec
) -> Job:
    """Validate and record a job; hold it for approval or send it to the cluster after commit.

    With an idempotency key, a submission the same user already made with that key returns
    that job (its `replayed` attribute set) instead of a second one, so a client that did not
    hear the answer can safely send again."""
    _require_member(user, team)
    digest = _submission_digest(team=team, spec=spec) if idempotency_key else ""
    if idempotency_key:
        earlier = Job.objects.filter(owner=user, idempotency_key=idempotency_key).first()
        if earlier is not None:
            return _replayed(earlier, key=idempotency_key, digest=digest)
    # The named pool with its limits, read once for validation and the capacity check (a name
    # that is not the team's pool is left to job_validate to report; for "any pool" the check
    # reads the limits of all the team's pools itself).
    named = spec.get("pool")
    limit = None
    if isinstance(named, str) and named not in ("", "any"):
        limit = team_pool_limits(team=team, name=named)
        if limit is not None:
            spec = {**spec, "pool": limit["pool"]}
    values = job_validate(team=team, **spec)
    problem = job_capacity_problem(
        team=team,
        pool=values["pool"],
        workers=values["workers"],
        gpus_per_worker=values["gpus_per_worker"],
        pool_limit=limit,
    )
    if problem:
        raise ValidationError({problem[0]: problem[1]})
    gpus = values["workers"] * values["gpus_per_worker"]
    cluster_id = job_cluster_id(team=team, pool=values["pool"], gpus=gpus)
    if cluster_id is None:
        raise ValidationError(
            {"pool": "No cluster is registered to run jobs on yet; ask a platform admin."}
        )
    if values["retry_limit"] and not backend_of(cluster_id=cluster_id).retries_per_job:
        raise ValidationError(
            {
                "retry_limit": "This job runs on a Volcano cluster, which restarts the whole gang "
                "when a worker fails or is evicted; a retry limit per job is for Kueue clusters."
            }
        )
    if values["pool"] is None or not values["gang"]:
        backend = backend_of(cluster_id=cluster_id)
        if not values["gang"] and not backend.gang_optional:
            # Kueue admits a Workload whole or not at all: no way to start some workers.
            raise ValidationError(
                {
                    "gang": "This job runs on a Kueue cluster, where all workers always start "
                    "together; starting some of them first (gang off) is for Volcano clusters."
                }
            )
        if values["pool"] is None:
            # A Volcano job waits in one pool's queue (that pool's limit): its backend picks
            # the pool now (Kueue picks one itself when it admits the job).
            gpus = values["workers"] * values["gpus_per_worker"]
            values["pool"] = backend.pool_for_any_pool(team=team, cluster_id=cluster_id, gpus=gpus)
    policy, tier_held = approval_policy_for_tier(tier=values["tier"])
    if problem := registry_problem(image=values["image"], policy=policy):
        raise ValidationError({"image": problem})
    reasons = approval_reasons(policy=policy, tier_held=tier_held, values=values)
    now = timezone.now()
    if reasons:
        state, why = S.PENDING_APPROVAL, "Waits for the team lead: " + "; ".join(reasons) + "."
        pending = "Waiting for a team lead's approval: " + "; ".join(reasons) + "."
    else:
        state, why, pending = S.SUBMITTED, "Submitted.", ""
    # Under member fair sharing the job waits in its owner's own LocalQueue (Kueue clusters).
    local_queue = ""
    if team.member_fair_sharing and backend_of(cluster_id=cluster_id).member_queues:
        local_queue = member_queue_name(team, user)
    try:
        job = _job_record(
            team=team, owner=user, cluster_id=cluster_id, resubmitted_from=resubmitted_from,
            state=state, submitted_at=None if reasons else now, pending_reason=pending,
            idempotency_key=idempotency_key, idempotency_digest=digest, why=why,
            held=bool(reasons), now=now,
            local_queue=local_queue, **values,
        )  # fmt: skip
    except IntegrityError:
        # The same key raced in from another request: that one's job is the answer.
        if not idempotency_key:
            raise
        earlier = Job.objects.get(owner=user, idempotency_key=idempotency_key)
        return _replayed(earlier, key=idempotency_key, digest=digest)
    return job


def _submission_digest(*, team: Team, spec: dict) -> str:
    """What a submission asked for, as a digest: the same fields give the same digest."""
    canonical = json.dumps({"team": team.pk, **spec}, sort_keys=True, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _replayed(earlier: Job, *, key: str, digest: str) -> Job:
    """The job an idempotency key already made, when the request is the same one again."""
    if earlier.idempotency_digest and earlier.idempotency_digest != digest:
        raise IdempotencyKeyReused(
            f"The Idempotency-Key {key!r} already submitted job #{earlier.pk} with other "
            "fields. Send the same body to get that job again, or use a new key for a new job."
        )
    earlier.replayed = True
    return earlier


def _job_record(*, why: str, held: bool, now, **fields) -> Job:
    """Create the job row, its name in the cluster and its first transition, in one
    transaction; after commit, tell the approvers or ask for the apply."""
    state, cluster_id = fields["state"], fields["cluster_id"]
    with transaction.atomic():
        job = Job.objects.create(**fields)
        job.k8s_name = job_k8s_name(name=job.name, job_id=job.pk)
        Job.objects.filter(pk=job.pk).update(k8s_name=job.k8s_name)
        # The row is new and nobody else can see it yet, so leaving draft needs no lock.
        JobTransition.objects.create(job=job, from_state=S.DRAFT, to_state=state, at=now,
                                     reason=why)  # fmt: skip
        audit(actor=fields["owner"], verb="job.submit", obj=job, team=fields["team"],
              after={"state": state, "pool": str(fields.get("pool") or "any"),
                     "workers": fields.get("workers"),
                     "gpus_per_worker": fields.get("gpus_per_worker")},
              message=why)  # fmt: skip
        if held:
            transaction.on_commit(lambda: job_notify_enqueue(job.pk, S.PENDING_APPROVAL))
        else:
            transaction.on_commit(lambda: jobs_apply_request(cluster_id=cluster_id))
    return job


def _require_approver(job: Job, user) -> None:
    approvers = job_approvers(job=job)
    if not approvers.includes(user):
        raise PermissionDenied(approvers.refusal(user))


def job_approve(*, job: Job, approver) -> Job:
    """A team lead (never the job's owner; see selectors.approvers) lets a held job go."""
    _require_approver(job, approver)
    with transaction.atomic():
        job_transition(
            job_id=job.pk,
            to_state=S.SUBMITTED,
            reason=f"Approved by {approver.get_username()}.",
            fields={"approved_by": approver, "pending_reason": ""},
        )
        audit(actor=approver, verb="job.approve", obj=job, team=job.team)
        if job.cluster_id is not None:
            transaction.on_commit(lambda: jobs_apply_request(cluster_id=job.cluster_id))
        # The owner waited on a person: tell them it is on its way.
        transaction.on_commit(lambda: job_notify_enqueue(job.pk, S.SUBMITTED))
    job.refresh_from_db()
    return job


def job_reject(*, job: Job, approver, reason: str = "") -> Job:
    """A team lead (never the job's owner) turns a held job down."""
    _require_approver(job, approver)
    why = f"Rejected by {approver.get_username()}" + (f": {reason.strip()}" if reason else ".")
    with transaction.atomic():
        job_transition(
            job_id=job.pk,
            to_state=S.REJECTED,
            reason=why,
            fields={"approved_by": approver, "pending_reason": "", "exit_reason": why[:2000]},
        )
        audit(actor=approver, verb="job.reject", obj=job, team=job.team, message=why)
    job.refresh_from_db()
    return job


def job_resubmit(*, job: Job, user) -> Job:
    """Submit a copy of an earlier job's spec as a new job."""
    return job_submit(
        user=user,
        team=job.team,
        resubmitted_from=job,
        **job_spec(job),
    )


def job_spec(job: Job) -> dict:
    """The submission fields of a job, as job_submit takes them."""
    return {
        "name": job.name,
        "image": job.image,
        "command": list(job.command),
        "args": list(job.args),
        "env": dict(job.env),
        "workers": job.workers,
        "gpus_per_worker": job.gpus_per_worker,
        "pool": job.pool,
        "tier": job.tier,
        "gang": job.gang,
        "max_runtime_seconds": job.max_runtime_seconds,
        "expected_runtime_seconds": job.expected_runtime_seconds,
        "retry_limit": job.retry_limit,
        "cpu": cpu_text(job.cpu_millis) if job.cpu_millis else None,
        "memory": memory_text(job.memory_mib) if job.memory_mib else None,
        "shm_size": memory_text(job.shm_mib) if job.shm_mib else None,
        "volumes": [dict(v) for v in job.volumes],
        "secret_env": {k: dict(v) for k, v in job.secret_env.items()},
        "topology_level": job.topology_level,
        "topology_mode": job.topology_mode,
        "kind": job.kind,
        "driver_command": list(job.driver_command),
        "interruptible": job.interruptible,
        "checkpoint_volume": job.checkpoint_volume,
        "checkpoint_path": job.checkpoint_path,
    }
