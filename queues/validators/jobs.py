"""Validation of a job submission: clean what a form or an API call sent into model values, or
say per field what to fix."""

from __future__ import annotations

import json
import re

from django.core.exceptions import ValidationError

from fleet.models import NodePool
from fleet.validators import ENV_NAME_RE
from queues.backends import backend_for, backend_of
from queues.models import PriorityTier, Team
from queues.selectors.jobs import job_cluster_id, job_pools, team_pool_limits
from queues.validators.kinds import clean_kind
from queues.validators.placement import clean_placement
from queues.validators.resources import (
    clean_secret_env,
    clean_volumes,
    clean_worker_resources,
)
from queues.validators.spot import clean_spot

# Docker reference: [registry[:port]/]path[:tag][@digest]
IMAGE_RE = re.compile(
    r"^(?:(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*"
    r"[a-zA-Z0-9])?)*(?::[0-9]+)?/)?[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
    r"(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
    r"(?:@sha256:[a-f0-9]{64})?$"
)
# Set by the platform for rendezvous (torchrun) and by the Job controller.
RESERVED_ENV = frozenset(
    {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "NNODES", "NODE_RANK", "NPROC_PER_NODE",
     "JOB_COMPLETION_INDEX"}
)  # fmt: skip
MAX_ENV_VARS = 64
MAX_SPEC_BYTES = 32 * 1024
MAX_WORKERS = 128
MAX_GPUS_PER_WORKER = 64
MAX_RETRY_LIMIT = 10
MAX_RUNTIME_SECONDS = 30 * 24 * 3600
MAX_NAME_LENGTH = 200


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
    bad = [k for k in value if not isinstance(k, str) or not ENV_NAME_RE.fullmatch(k)]
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
    values = {k: str(v) for k, v in value.items()}
    if any("\x00" in v for v in values.values()):
        errors["env"] = "Values may not contain NUL characters."
        return {}
    return values


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


def job_args_env_clean(*, args, env) -> tuple[list, dict, dict]:
    """A job's arguments and environment (either shape) as job_validate reads them, with its
    field errors: for what combines them before job_validate sees them (a sweep's grid)."""
    errors = {}
    args = _str_list(errors, "args", args, required=False)
    env = _env(errors, env)
    return args, env, errors


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
    retry_limit=0,
    cpu=None,
    memory=None,
    shm_size=None,
    volumes=None,
    secret_env=None,
    topology_level=None,
    topology_mode=None,
    kind=None,
    driver_command=None,
    interruptible=False,
    checkpoint_volume=None,
    checkpoint_path=None,
) -> dict:
    """Clean a submission into model values; raise ValidationError with field errors."""
    errors: dict[str, str] = {}
    name = (name or "").strip() if isinstance(name, str) else ""
    if not name:
        errors["name"] = "Give the job a name."
    elif len(name) > MAX_NAME_LENGTH:
        errors["name"] = f"Use at most {MAX_NAME_LENGTH} characters."
    elif "\x00" in name:
        errors["name"] = "A name may not contain NUL characters."
    image = image.strip() if isinstance(image, str) else ""
    if not image:
        errors["image"] = "Give a container image, e.g. ghcr.io/acme/train:1.0."
    elif len(image) > 500 or not IMAGE_RE.fullmatch(image) or not _registry_ok(image):
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
    retry_limit = _int_field(
        errors, "retry_limit", 0 if retry_limit in (None, "") else retry_limit, low=0,
        high=MAX_RETRY_LIMIT,
    )  # fmt: skip
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
    if pool is not None and pool.sharing == NodePool.Sharing.TIME_SLICING and (gpus or 0) > 1:
        errors["gpus_per_worker"] = (
            f"Pool {pool.name} shares its GPUs by time-slicing: a worker takes one share. More "
            "would not give it more GPU (two shares may be slices of the same GPU), and the "
            "device plugin refuses a container that asks for more than one "
            "(failRequestsGreaterThanOne). Ask for 1 per worker, and more workers."
        )
    pools = job_pools(team=team, pool=pool) if "pool" not in errors else []
    cpu, memory, shm = clean_worker_resources(
        errors, pools=pools, gpus=gpus, cpu=cpu, memory=memory, shm_size=shm_size
    )
    total = (workers or 0) * (gpus or 0) if workers is not None and gpus is not None else None
    cluster_id = job_cluster_id(team=team, pool=pool, gpus=total) if "pool" not in errors else None
    topology_level, topology_mode = clean_placement(
        errors, pool=pool, level=topology_level, mode=topology_mode, workers=workers, gpus=gpus
    )
    kind, driver_command = clean_kind(
        errors, kind=kind, driver_command=driver_command,
        # Only the other kinds care (and a plain Job costs no query).
        cluster_kinds=backend_of(cluster_id=cluster_id).job_kinds
        if cluster_id and kind not in (None, "", "job")
        else backend_for(None).job_kinds,
    )  # fmt: skip
    interruptible, checkpoint_volume, checkpoint_path, volumes = clean_spot(
        errors, pool=pool, interruptible=interruptible, checkpoint_volume=checkpoint_volume,
        checkpoint_path=checkpoint_path, kind=kind, volumes=volumes,
    )  # fmt: skip
    volumes = clean_volumes(errors, team=team, cluster_id=cluster_id, volumes=volumes)
    if checkpoint_volume and f"'{checkpoint_volume}'" in str(errors.get("volumes", "")):
        errors["checkpoint_volume"] = errors.pop("volumes")  # said where it was asked
    secret_env = clean_secret_env(
        errors, team=team, cluster_id=cluster_id, secret_env=secret_env, env=env
    )
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
        "retry_limit": retry_limit,
        "cpu_millis": cpu,
        "memory_mib": memory,
        "shm_mib": shm,
        "volumes": volumes,
        "secret_env": secret_env,
        "topology_level": topology_level,
        "topology_mode": topology_mode,
        "kind": kind,
        "driver_command": driver_command,
        "interruptible": interruptible,
        "checkpoint_volume": checkpoint_volume,
        "checkpoint_path": checkpoint_path,
    }
