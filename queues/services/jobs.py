"""Writes for jobs: submit (validate, policy, admissibility), approve, reject, cancel, resubmit,
and the one state-transition helper every change of Job.state goes through."""

from __future__ import annotations

import json
import re
from datetime import timedelta

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from fleet.models import Cluster, NodePool
from queues.manifests.jobs import job_k8s_name
from queues.models import ApprovalPolicy, Job, JobTransition, PriorityTier, Team
from queues.roles import is_platform_admin
from queues.selectors.jobs import (
    approval_policy_for_tier,
    job_capacity_problem,
    job_cluster_id,
    team_pool_limits,
)
from queues.selectors.tenancy import team_role, user_is_team_lead
from queues.services.quotas import audit

S = Job.State

# Which state may follow which. The cluster can skip states we never saw (a 1-second job may be
# queued, admitted and finished between two syncs), so later states are reachable directly.
ALLOWED = {
    S.DRAFT: {S.PENDING_APPROVAL, S.SUBMITTED, S.CANCELLED},
    S.PENDING_APPROVAL: {S.SUBMITTED, S.REJECTED, S.CANCELLED},
    S.SUBMITTED: {S.QUEUED, S.ADMITTED, S.RUNNING, S.SUCCEEDED, S.FAILED, S.PREEMPTED,
                  S.CANCELLED},
    S.QUEUED: {S.ADMITTED, S.RUNNING, S.SUCCEEDED, S.FAILED, S.PREEMPTED, S.CANCELLED},
    S.ADMITTED: {S.QUEUED, S.RUNNING, S.SUCCEEDED, S.FAILED, S.PREEMPTED, S.CANCELLED},
    S.RUNNING: {S.QUEUED, S.SUCCEEDED, S.FAILED, S.PREEMPTED, S.CANCELLED},
    # Kueue requeues a preempted workload; it stays "preempted" until admitted again.
    S.PREEMPTED: {S.QUEUED, S.ADMITTED, S.RUNNING, S.SUCCEEDED, S.FAILED, S.CANCELLED},
    S.SUCCEEDED: set(),
    S.FAILED: set(),
    S.CANCELLED: set(),
    S.REJECTED: set(),
}  # fmt: skip

# A request to apply a cluster's jobs is made again when its message has not been taken for
# this long (lost with a restarted broker, say).
APPLY_REQUEST_FRESH = timedelta(seconds=10)
# The transition timestamps in the order a job passes them (finished_at last).
STAMP_FIELDS = ("submitted_at", "queued_at", "admitted_at", "started_at", "finished_at")
TIMESTAMP_FIELD = {
    S.SUBMITTED: "submitted_at",
    S.QUEUED: "queued_at",
    S.ADMITTED: "admitted_at",
    S.RUNNING: "started_at",
    S.SUCCEEDED: "finished_at",
    S.FAILED: "finished_at",
    S.CANCELLED: "finished_at",
    S.REJECTED: "finished_at",
}

# States the owner (and the team webhook) hears about.
NOTIFY_STATES = {
    S.PENDING_APPROVAL,
    S.RUNNING,
    S.SUCCEEDED,
    S.FAILED,
    S.PREEMPTED,
    S.CANCELLED,
    S.REJECTED,
}

# Docker reference: [registry[:port]/]path[:tag][@digest]
IMAGE_RE = re.compile(
    r"^(?:(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*"
    r"[a-zA-Z0-9])?)*(?::[0-9]+)?/)?[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
    r"(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
    r"(?:@sha256:[a-f0-9]{64})?$"
)
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Set by the platform for rendezvous (torchrun) and by the Job controller.
RESERVED_ENV = frozenset(
    {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "NNODES", "NODE_RANK", "NPROC_PER_NODE",
     "JOB_COMPLETION_INDEX"}
)  # fmt: skip
MAX_ENV_VARS = 64
MAX_SPEC_BYTES = 32 * 1024
MAX_WORKERS = 128
MAX_GPUS_PER_WORKER = 64
MAX_RUNTIME_SECONDS = 30 * 24 * 3600
MAX_NAME_LENGTH = 200


class TransitionError(ValidationError):
    """A state change that the job's current state does not allow."""


def _transition_update(current: dict, to_state: str, at, fields: dict | None) -> tuple[dict, ...]:
    """The columns a move to `to_state` writes, given the job's current state and stamps, and
    the time recorded for it."""
    now = timezone.now()
    at = min(at, now) if at else now
    # Cluster clocks have second precision and may lag ours: never let a later state carry an
    # earlier time than the states before it.
    earlier = [current[f] for f in STAMP_FIELDS[:4] if current[f] is not None]
    if earlier:
        at = max(at, *earlier)
    update = {"state": to_state}
    stamp = TIMESTAMP_FIELD.get(to_state)
    if stamp and current[stamp] is None:
        update[stamp] = at
    update.update(fields or {})
    return update, at


def job_transition(
    *,
    job_id: int,
    to_state: str,
    reason: str = "",
    at=None,
    fields: dict | None = None,
    from_states=None,
) -> bool:
    """Move a job to a state: lock, check, stamp, record. False when it is already there, or
    when `from_states` is given and the job has meanwhile left them (a lost race, not an error).

    Only the state and its timestamps are read (under the row lock) and only the changed
    columns written: this runs for every job several times, from the apply task and the sync.
    """
    with transaction.atomic():
        current = (
            Job.objects.select_for_update().filter(pk=job_id).values("state", *STAMP_FIELDS).get()
        )
        state = current["state"]
        if from_states is not None and state not in from_states:
            return False
        if state == to_state:
            if fields:
                Job.objects.filter(pk=job_id).update(**fields)
            return False
        if to_state not in ALLOWED[state]:
            raise TransitionError(
                f"A {S(state).label.lower()} job cannot become {S(to_state).label.lower()}."
            )
        update, at = _transition_update(current, to_state, at, fields)
        Job.objects.filter(pk=job_id).update(**update)
        JobTransition.objects.create(
            job_id=job_id, from_state=state, to_state=to_state, at=at, reason=reason[:2000]
        )
        if to_state in NOTIFY_STATES:
            transaction.on_commit(lambda: _enqueue_notify(job_id, to_state))
    return True


def jobs_transition(
    *, fields_by_job: dict[int, dict], to_state: str, from_state: str, reason: str = ""
) -> list[int]:
    """job_transition for a batch of jobs moving from one state to another, each with its own
    fields: their states are locked and read in one query and the transitions inserted in one.
    Returns the ids that moved; jobs that have meanwhile left `from_state` are left alone."""
    if to_state not in ALLOWED[from_state]:
        raise TransitionError(f"A {from_state} job cannot become {to_state}.")
    moved, records = [], []
    with transaction.atomic():
        rows = (
            Job.objects.select_for_update()
            .filter(pk__in=list(fields_by_job), state=from_state)
            .order_by("pk")
            .values("pk", *STAMP_FIELDS)
        )
        for current in rows:
            job_id = current["pk"]
            update, at = _transition_update(current, to_state, None, fields_by_job[job_id])
            # An update per row, inside the one transaction: bulk_update's CASE expressions
            # measured three to four times the CPU for batches of 5 to 50.
            Job.objects.filter(pk=job_id).update(**update)
            records.append(
                JobTransition(job_id=job_id, from_state=from_state, to_state=to_state, at=at,
                              reason=reason[:2000])
            )  # fmt: skip
            moved.append(job_id)
        JobTransition.objects.bulk_create(records)
        if to_state in NOTIFY_STATES:
            for job_id in moved:
                transaction.on_commit(lambda job_id=job_id: _enqueue_notify(job_id, to_state))
    return moved


# The tasks import the sync service, which imports this module: import them when sending.
def _enqueue_notify(job_id: int, state: str) -> None:
    from queues.tasks import notify_job

    notify_job.delay(job_id, state)


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


def _enqueue_delete(job_id: int) -> None:
    from queues.tasks import delete_job

    delete_job.delay(job_id)


# ---------------------------------------------------------------------------------- validation


def _registry_ok(image: str) -> bool:
    # A first component is a registry only with a dot, a port or "localhost"; else it is part
    # of the repository path, which must be lower case.
    first, _, rest = image.partition("/")
    if not rest or "." in first or ":" in first or first == "localhost":
        return True
    return first == first.lower()


def _int_field(errors, field, value, *, low, high, required=True):
    if value is None or value == "":
        if required:
            errors[field] = "This field is required."
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            value = int(str(value))
        except ValueError:
            errors[field] = "Enter a whole number."
            return None
    if value < low or value > high:
        errors[field] = f"Enter a number from {low} to {high}."
        return None
    return value


def _str_list(errors, field, value, *, required):
    if value is None:
        value = []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        errors[field] = 'Give a list of strings, e.g. ["python", "train.py"].'
        return []
    if required and (not value or not value[0].strip()):
        errors[field] = 'Give the command to run, e.g. ["python", "train.py"].'
        return []
    if any("\x00" in v for v in value):
        errors[field] = "Strings may not contain NUL characters."
        return []
    return value


def _env(errors, value):
    if value in (None, ""):
        return {}
    if isinstance(value, list):
        # Also accept the Kubernetes shape [{"name": ..., "value": ...}].
        try:
            value = {item["name"]: item.get("value", "") for item in value}
        except (TypeError, KeyError):
            errors["env"] = "Give a map of NAME to value."
            return {}
    if not isinstance(value, dict):
        errors["env"] = "Give a map of NAME to value."
        return {}
    if len(value) > MAX_ENV_VARS:
        errors["env"] = f"Use at most {MAX_ENV_VARS} environment variables."
        return {}
    bad = [k for k in value if not isinstance(k, str) or not ENV_NAME_RE.match(k)]
    if bad:
        errors["env"] = (
            f"Invalid variable name {str(bad[0])[:60]!r}: use letters, digits and '_', "
            "not starting with a digit."
        )
        return {}
    reserved = sorted(RESERVED_ENV & set(value))
    if reserved:
        errors["env"] = f"{reserved[0]} is set by the platform for multi-worker rendezvous."
        return {}
    if not all(
        isinstance(v, str | int | float) and not isinstance(v, bool) for v in value.values()
    ):
        errors["env"] = "Values must be strings."
        return {}
    return {k: str(v) for k, v in value.items()}


def _resolve_tier(errors, tier):
    if isinstance(tier, PriorityTier):
        return tier
    if tier in (None, ""):
        default = PriorityTier.objects.filter(is_default=True).first()
        if default is None:
            errors["tier"] = "No default tier is configured; choose one."
        return default
    found = PriorityTier.objects.filter(name=tier).first()
    if found is None:
        errors["tier"] = f"Unknown tier {str(tier)[:63]!r}."
    return found


def _resolve_pool(errors, team, pool):
    if pool in (None, "", "any"):
        return None
    if isinstance(pool, NodePool):
        return pool
    limit = team_pool_limits(team=team, name=str(pool))
    if limit is None:
        errors["pool"] = f"Your team has no quota in a pool named {str(pool)[:63]!r}."
        return None
    return limit["pool"]


def job_validate(
    *,
    team: Team,
    name,
    image,
    command,
    args=None,
    env=None,
    workers=1,
    gpus_per_worker=1,
    pool=None,
    tier=None,
    gang=True,
    max_runtime_seconds=None,
    expected_runtime_seconds=None,
) -> dict:
    """Clean a submission into model values; raise ValidationError with field errors."""
    errors: dict[str, str] = {}
    name = (name or "").strip() if isinstance(name, str) else ""
    if not name:
        errors["name"] = "Give the job a name."
    elif len(name) > MAX_NAME_LENGTH:
        errors["name"] = f"Use at most {MAX_NAME_LENGTH} characters."
    image = image.strip() if isinstance(image, str) else ""
    if not image:
        errors["image"] = "Give a container image, e.g. ghcr.io/acme/train:1.0."
    elif len(image) > 500 or not IMAGE_RE.match(image) or not _registry_ok(image):
        errors["image"] = (
            "Not a valid image reference; use [registry/]name[:tag][@sha256:digest], "
            "e.g. ghcr.io/acme/train:1.0."
        )
    command = _str_list(errors, "command", command, required=True)
    args = _str_list(errors, "args", args, required=False)
    env = _env(errors, env)
    workers = _int_field(errors, "workers", workers, low=1, high=MAX_WORKERS)
    gpus = _int_field(errors, "gpus_per_worker", gpus_per_worker, low=0, high=MAX_GPUS_PER_WORKER)
    max_runtime = _int_field(
        errors, "max_runtime_seconds", max_runtime_seconds, low=1, high=MAX_RUNTIME_SECONDS
    )
    expected = _int_field(
        errors,
        "expected_runtime_seconds",
        expected_runtime_seconds,
        low=1,
        high=MAX_RUNTIME_SECONDS,
        required=False,
    )
    if expected and max_runtime and expected > max_runtime:
        errors["expected_runtime_seconds"] = "Cannot be longer than the maximum runtime."
    if "command" not in errors and "args" not in errors and "env" not in errors:
        size = len(json.dumps([command, args, env]).encode())
        if size > MAX_SPEC_BYTES:
            errors["command"] = (
                f"Command, arguments and environment together take {size} bytes; "
                f"the limit is {MAX_SPEC_BYTES}."
            )
    tier = _resolve_tier(errors, tier)
    pool = _resolve_pool(errors, team, pool)
    if errors:
        raise ValidationError(errors)
    return {
        "name": name,
        "image": image,
        "command": command,
        "args": args,
        "env": env,
        "workers": workers,
        "gpus_per_worker": gpus,
        "pool": pool,
        "tier": tier,
        "gang": bool(gang),
        "max_runtime_seconds": max_runtime,
        "expected_runtime_seconds": expected,
    }


# ---------------------------------------------------------------------------------- workflow


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
        reasons.append(f"{gpus} GPUs is more than {policy.max_gpus_without_approval}")
    limit = policy.max_runtime_seconds_without_approval
    if limit is not None and values["max_runtime_seconds"] > limit:
        reasons.append(f"a maximum runtime of {values['max_runtime_seconds']} s is over {limit} s")
    return reasons


def approval_policy_update(
    *, actor, tiers=None, max_gpus_without_approval=None, max_runtime_seconds_without_approval=None
) -> ApprovalPolicy:
    """Change the approval policy (platform admins only)."""
    if not is_platform_admin(actor):
        raise PermissionDenied("Only platform admins edit the approval policy.")
    with transaction.atomic():
        policy = approval_policy_get()
        policy = ApprovalPolicy.objects.select_for_update().get(pk=policy.pk)
        before = _policy_values(policy)
        policy.max_gpus_without_approval = max_gpus_without_approval
        policy.max_runtime_seconds_without_approval = max_runtime_seconds_without_approval
        policy.save()
        if tiers is not None:
            policy.tiers_needing_approval.set(tiers)
        audit(
            actor=actor,
            verb="approval_policy.update",
            obj=policy,
            before=before,
            after=_policy_values(policy),
        )
    return policy


def _policy_values(policy: ApprovalPolicy) -> dict:
    return {
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


def job_submit(*, user, team: Team, resubmitted_from: Job | None = None, **spec) -> Job:
    """Validate and record a job; hold it for approval or send it to the cluster after commit."""
    _require_member(user, team)
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
    cluster_id = job_cluster_id(team=team, pool=values["pool"])
    if cluster_id is None:
        raise ValidationError(
            {"pool": "No cluster is registered to run jobs on yet; ask a platform admin."}
        )
    policy, tier_held = approval_policy_for_tier(tier=values["tier"])
    reasons = approval_reasons(policy=policy, tier_held=tier_held, values=values)
    now = timezone.now()
    if reasons:
        state, why = S.PENDING_APPROVAL, "Waits for the team lead: " + "; ".join(reasons) + "."
        pending = "Waiting for a team lead's approval: " + "; ".join(reasons) + "."
    else:
        state, why, pending = S.SUBMITTED, "Submitted.", ""
    with transaction.atomic():
        job = Job.objects.create(
            team=team,
            owner=user,
            cluster_id=cluster_id,
            resubmitted_from=resubmitted_from,
            state=state,
            submitted_at=None if reasons else now,
            pending_reason=pending,
            **values,
        )
        job.k8s_name = job_k8s_name(name=job.name, job_id=job.pk)
        Job.objects.filter(pk=job.pk).update(k8s_name=job.k8s_name)
        # The row is new and nobody else can see it yet, so leaving draft needs no lock.
        JobTransition.objects.create(job=job, from_state=S.DRAFT, to_state=state, at=now,
                                     reason=why)  # fmt: skip
        if reasons:
            transaction.on_commit(lambda: _enqueue_notify(job.pk, S.PENDING_APPROVAL))
        else:
            transaction.on_commit(lambda: jobs_apply_request(cluster_id=cluster_id))
    return job


def job_approve(*, job: Job, approver) -> Job:
    """A team lead lets a held job go to the cluster."""
    if not user_is_team_lead(user=approver, team=job.team):
        raise PermissionDenied("Only a lead of the team can approve its jobs.")
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
        transaction.on_commit(lambda: _enqueue_notify(job.pk, S.SUBMITTED))
    job.refresh_from_db()
    return job


def job_reject(*, job: Job, approver, reason: str = "") -> Job:
    """A team lead turns a held job down."""
    if not user_is_team_lead(user=approver, team=job.team):
        raise PermissionDenied("Only a lead of the team can reject its jobs.")
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


def job_can_cancel(*, user, job: Job) -> bool:
    return (
        job.owner_id == user.pk
        or is_platform_admin(user)
        or user_is_team_lead(user=user, team=job.team)
    )


def job_cancel(*, job: Job, user) -> Job:
    """Cancel a job: delete its cluster objects (by a task) and keep the record."""
    if not job_can_cancel(user=user, job=job):
        raise PermissionDenied("Only the job's owner or a team lead can cancel it.")
    with transaction.atomic():
        current = Job.objects.select_for_update().get(pk=job.pk)
        if current.state in Job.FINAL_STATES:
            raise TransitionError(f"The job has already {current.get_state_display().lower()}.")
        in_cluster = current.state not in (S.DRAFT, S.PENDING_APPROVAL)
        job_transition(
            job_id=job.pk,
            to_state=S.CANCELLED,
            reason=f"Cancelled by {user.get_username()}.",
            fields={"pending_reason": "", "queue_position": None, "estimated_start": None},
        )
        audit(actor=user, verb="job.cancel", obj=job, team=job.team)
        if in_cluster:
            transaction.on_commit(lambda: _enqueue_delete(job.pk))
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
    }
