"""Topology-aware placement: a job may ask to keep its workers within one domain (a block, a
rack, a host) of its pool's topology, required or preferred. Part of job_validate: cleans the
two fields or sets a field error that says what to fix."""

from __future__ import annotations

from fleet.selectors.inventory import pool_domains
from queues.models import Job

MODES = tuple(Job.Placement.values)


def clean_placement(errors: dict, *, pool, level, mode, workers, gpus) -> tuple[str, str]:
    """(topology_level, topology_mode): ("", "") when the job asks for no placement."""
    if level in (None, ""):
        if mode not in (None, "") and mode not in MODES:
            errors["topology_mode"] = "Use required or preferred."
        return "", ""
    if not isinstance(level, str):
        errors["topology_level"] = "Give a topology level by name, e.g. rack."
        return "", ""
    level = level.strip()
    mode = mode or Job.Placement.REQUIRED
    if mode not in MODES:
        errors["topology_mode"] = (
            "Use required (the job waits until one domain holds every worker) or preferred "
            "(as few domains as there are room in)."
        )
    if "pool" in errors:
        return level, mode
    if pool is None:
        errors["topology_level"] = (
            "Choose a pool: topology levels are a pool's, and 'any pool' may pick one without."
        )
    elif not pool.topology_levels:
        errors["topology_level"] = (
            f"Pool {pool.name} describes no topology; leave placement empty or choose a pool "
            "that has levels."
        )
    elif pool.topology_level(level) is None:
        names = ", ".join(lv["name"] for lv in pool.topology_levels)
        errors["topology_level"] = f"Pool {pool.name} has no level {level!r}; its levels: {names}."
    elif mode == Job.Placement.REQUIRED and workers and gpus:
        domains = pool_domains(pool=pool, gpus_per_worker=gpus).get(level) or []
        most = max((d["fit_empty"] for d in domains), default=None)
        if most is not None and most < workers:
            errors["topology_level"] = (
                f"At most {most} workers of {gpus} GPU{'s' if gpus != 1 else ''} fit within one "
                f"{level} of pool {pool.name}, so this job could never start: ask for fewer "
                "workers, a wider level, or make the placement preferred."
            )
    return level, mode
