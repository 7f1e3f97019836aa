"""What a job's workers get besides GPUs: CPU and memory (defaults and limits from the pool),
/dev/shm, the team volumes they mount and the team secrets they read. Part of job_validate:
each function cleans its fields into model values or sets a field error saying what to fix."""

from __future__ import annotations

import posixpath
import re

from fleet.quantities import DEFAULT_WORKER_SIZE, cpu_millis, cpu_text, memory_mib, memory_text
from fleet.selectors.inventory import pool_worker_sizes
from fleet.validators import ENV_NAME_RE
from queues.models import TeamSecret, TeamVolume

MAX_VOLUMES = 16
MAX_SECRET_ENV = 64
# Paths the container needs for itself (and everything under them): a volume there would break
# the pod or hide what Kubernetes mounts (the service account's token, /dev/shm).
RESERVED_MOUNTS = ("/dev", "/proc", "/sys", "/etc", "/var/run/secrets", "/run/secrets")
MOUNT_PATH_RE = re.compile(r"^/[A-Za-z0-9._\-/]*$")
MIN_MEMORY_MIB = 64


def clean_worker_resources(errors: dict, *, pools, gpus, cpu, memory, shm_size):
    """(cpu_millis, memory_mib, shm_mib) per worker. Blank CPU and memory take the pool's share
    per GPU (for "any pool", the smallest share of the team's pools, so it fits in each); a
    worker may have at most what the pool's largest node has. shm_size is part of memory."""
    by_pool = pool_worker_sizes(pools=pools)
    sizes = [by_pool[p.pk] for p in pools]
    gpus = gpus or 0
    cpu_value = _quantity(errors, "cpu", cpu, cpu_millis, "a CPU amount, e.g. 8 or 500m", 10)
    memory_value = _quantity(
        errors, "memory", memory, memory_mib, "a memory amount, e.g. 64Gi or 512Mi",
        MIN_MEMORY_MIB,
    )  # fmt: skip
    shm = _quantity(errors, "shm_size", shm_size, memory_mib, "a size, e.g. 8Gi", 1)
    bad = {f for f in ("cpu", "memory", "shm_size") if f in errors}
    if cpu_value is None:
        cpu_value = min((s.default_cpu(gpus) for s in sizes), default=None)
    if memory_value is None:
        memory_value = min((s.default_memory(gpus) for s in sizes), default=None)
    # The defaults when the team has no pool yet (the job is refused for that elsewhere).
    if cpu_value is None:
        cpu_value = DEFAULT_WORKER_SIZE.default_cpu(gpus)
    if memory_value is None:
        memory_value = DEFAULT_WORKER_SIZE.default_memory(gpus)
    for field, value, limit_of, text, what in (
        ("cpu", cpu_value, "max_cpu_millis", cpu_text, "CPUs"),
        ("memory", memory_value, "max_memory_mib", memory_text, "memory"),
    ):
        if field in bad:
            continue
        limits = [(getattr(s, limit_of), pool) for s, pool in zip(sizes, pools, strict=True)]
        known = [(limit, pool) for limit, pool in limits if limit]
        if not known:
            continue
        limit, pool = min(known, key=lambda item: item[0])
        if value > limit:
            errors[field] = (
                f"At most {text(limit)} {what} per worker: that is what the largest node in "
                f"pool {pool.name} has. Ask for less, or use more workers."
            )
    if shm is not None and not bad and shm > memory_value:
        errors["shm_size"] = (
            f"/dev/shm is held in the worker's memory: use at most {memory_text(memory_value)}, "
            "or ask for more memory."
        )
    return cpu_value, memory_value, shm


def _quantity(errors, field, value, parse, example, low):
    if value in (None, ""):
        return None
    amount = parse(value)
    if amount is None:
        errors[field] = f"Not a Kubernetes quantity; give {example}."
        return None
    if amount < low:
        errors[field] = f"Too small; give {example}."
        return None
    if amount > 2**31 - 1:
        errors[field] = f"Too large; give {example}."
        return None
    return amount


def clean_volumes(errors: dict, *, team, cluster_id, volumes) -> list[dict]:
    """[{"volume", "mount_path", "read_only"}]: the team's volumes on the job's cluster."""
    if volumes in (None, "", [], {}):
        return []
    if not isinstance(volumes, list) or not all(isinstance(v, dict) for v in volumes):
        errors["volumes"] = 'Give a list like [{"volume": "datasets", "mount_path": "/data"}].'
        return []
    if len(volumes) > MAX_VOLUMES:
        errors["volumes"] = f"Mount at most {MAX_VOLUMES} volumes."
        return []
    known = set(
        TeamVolume.objects.filter(team=team, cluster_id=cluster_id).values_list("name", flat=True)
    )
    out, paths = [], set()
    for item in volumes:
        name, path = item.get("volume"), item.get("mount_path")
        read_only = item.get("read_only", False)
        if not isinstance(name, str) or not name:
            errors["volumes"] = "Each mount needs the volume's name."
            return []
        if name not in known:
            where = " on this job's cluster" if known else ""
            names = ", ".join(sorted(known)) or "none yet; a team lead creates them"
            errors["volumes"] = (
                f"Your team has no volume named {name[:63]!r}{where} (its volumes: {names})."
            )
            return []
        if not isinstance(path, str) or not MOUNT_PATH_RE.fullmatch(path) or "//" in path:
            errors["volumes"] = (
                f"Mount path for {name}: give an absolute path such as /data "
                "(letters, digits, '.', '_', '-' and '/')."
            )
            return []
        path, problem = mount_path_clean(path)
        if problem:
            errors["volumes"] = f"Mount path for {name}: {problem}"
            return []
        if path in paths:
            errors["volumes"] = f"Two volumes are mounted at {path}."
            return []
        if not isinstance(read_only, bool):
            errors["volumes"] = f"read_only for {name} must be true or false."
            return []
        paths.add(path)
        out.append({"volume": name, "mount_path": path, "read_only": read_only})
    return out


def mount_path_clean(path: str) -> tuple[str, str]:
    """(the path normalised, what is wrong with it or ""): absolute, no '..' segment, and not
    the root or in a path the container needs for itself, compared after normalising."""
    if ".." in path.split("/"):
        return path, "give it without '..' segments."
    path = posixpath.normpath(path)
    if path == "/" or any(path == r or path.startswith(r + "/") for r in RESERVED_MOUNTS):
        return path, f"{path} is used by the container itself; mount the volume elsewhere."
    return path, ""


def clean_secret_env(errors: dict, *, team, cluster_id, secret_env, env) -> dict:
    """{"NAME": {"secret", "key"}}: env vars read from the team's secrets on the job's cluster.
    A value may be written "secret/key"."""
    if secret_env in (None, "", {}, []):
        return {}
    if not isinstance(secret_env, dict):
        errors["secret_env"] = 'Give a map like {"WANDB_API_KEY": "wandb/api-key"}.'
        return {}
    if len(secret_env) > MAX_SECRET_ENV:
        errors["secret_env"] = f"Use at most {MAX_SECRET_ENV} variables from secrets."
        return {}
    secrets = {
        s.name: s
        for s in TeamSecret.objects.filter(
            team=team, cluster_id=cluster_id, kind=TeamSecret.Kind.GENERIC
        )
    }
    out = {}
    for var, ref in secret_env.items():
        if not isinstance(var, str) or not ENV_NAME_RE.fullmatch(var):
            errors["secret_env"] = (
                f"Invalid variable name {str(var)[:60]!r}: use letters, digits and '_', "
                "not starting with a digit."
            )
            return {}
        if var in (env or {}):
            errors["secret_env"] = f"{var} is also set in env; set it in one place."
            return {}
        if isinstance(ref, str) and "/" in ref:
            secret, key = ref.split("/", 1)
        elif isinstance(ref, dict):
            secret, key = ref.get("secret"), ref.get("key")
        else:
            secret = key = None
        if not isinstance(secret, str) or not isinstance(key, str):
            errors["secret_env"] = f'{var}: give "secret/key" or {{"secret": ..., "key": ...}}.'
            return {}
        found = secrets.get(secret)
        if found is None:
            names = ", ".join(sorted(secrets)) or "none yet; a team lead creates them"
            errors["secret_env"] = (
                f"{var}: your team has no secret named {secret[:63]!r} on this job's cluster "
                f"(its secrets: {names})."
            )
            return {}
        if key not in found.keys:
            errors["secret_env"] = (
                f"{var}: secret {secret} has no key {key[:63]!r} (its keys: "
                f"{', '.join(found.keys)})."
            )
            return {}
        out[var] = {"secret": secret, "key": key}
    return out
