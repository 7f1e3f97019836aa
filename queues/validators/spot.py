"""Spot capacity and checkpoints for a job. Part of job_validate: cleans the interruptible flag
and the checkpoint (a team volume and the path it is mounted at, where CHECKPOINT_DIR points),
or sets a field error that says what to fix."""

from __future__ import annotations

import posixpath

from queues.models import Job

DEFAULT_CHECKPOINT_PATH = "/checkpoints"


def clean_spot(
    errors: dict, *, pool, interruptible, checkpoint_volume, checkpoint_path, kind, volumes
) -> tuple[bool, str, str, list]:
    """(interruptible, checkpoint volume, checkpoint path, volumes with its mount added)."""
    interruptible = bool(interruptible)
    volume = checkpoint_volume.strip() if isinstance(checkpoint_volume, str) else ""
    path = checkpoint_path.strip() if isinstance(checkpoint_path, str) else ""
    if checkpoint_volume not in (None, "") and not isinstance(checkpoint_volume, str):
        errors["checkpoint_volume"] = "Give the name of one of your team's volumes."
    if pool is not None and pool.capacity_type == "spot" and not interruptible:
        errors["interruptible"] = (
            f"Pool {pool.name} is spot capacity, which the provider may take back at any "
            "moment: mark the job interruptible (and give it a checkpoint to resume from)."
        )
    if interruptible and kind not in (None, "", Job.Kind.JOB):
        errors["interruptible"] = (
            "Interruptible jobs run as the Job kind (a reclaimed worker is replaced without "
            "counting as a failure)."
        )
    if path and not volume:
        errors["checkpoint_volume"] = "Give the team volume the checkpoints are kept on."
    if not volume:
        return interruptible, "", "", volumes
    path = path or DEFAULT_CHECKPOINT_PATH
    if not path.startswith("/") or ".." in path.split("/"):
        errors["checkpoint_path"] = "Give an absolute path without '..' segments, e.g. /ckpt."
        return interruptible, volume, path, volumes
    path = posixpath.normpath(path)
    if volumes in (None, ""):
        volumes = []
    if not isinstance(volumes, list):
        return interruptible, volume, path, volumes
    mounted = next((m for m in volumes if isinstance(m, dict) and m.get("volume") == volume),
                   None)  # fmt: skip
    if mounted is None:
        volumes = [*volumes, {"volume": volume, "mount_path": path, "read_only": False}]
    else:
        base = str(mounted.get("mount_path", "")).rstrip("/") + "/"
        if mounted.get("read_only"):
            errors["checkpoint_volume"] = f"{volume} is mounted read-only: checkpoints are written."
        elif not (path.rstrip("/") + "/").startswith(base):
            errors["checkpoint_path"] = (
                f"{volume} is mounted at {base.rstrip('/')}: keep the checkpoints under it."
            )
    return interruptible, volume, path, volumes
