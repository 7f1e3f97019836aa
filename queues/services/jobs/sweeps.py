"""Sweeps: one submission over a grid of parameters makes one job per combination, all sharing
the sweep; they are submitted together (all or none) and cancelled together.

A grid names values per environment variable and per argument:
    {"env": {"LR": ["0.1", "0.01"]}, "args": {"--batch": ["32", "64"]}}
makes four jobs; each gets its env values set and `--batch <value>` appended to its arguments,
and a name that says which combination it is ("resnet [LR=0.1 --batch=32]").
"""

from __future__ import annotations

import itertools
import math
import re

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction

from core.roles import is_platform_admin
from queues.models import Job, Sweep, Team
from queues.selectors.tenancy import user_is_team_lead
from queues.services.audit import audit
from queues.services.jobs.lifecycle import TransitionError, job_cancel
from queues.services.jobs.submit import job_submit
from queues.validators.jobs import job_args_env_clean

MAX_JOBS = 100
MAX_VALUES = 50
ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ARG_NAME_RE = re.compile(r"--?[A-Za-z0-9][A-Za-z0-9_.-]*")


def _clean_grid(grid) -> tuple[list[tuple[str, str, list[str]]], dict]:
    """[(kind, name, values)] from a grid, or field errors."""
    if not isinstance(grid, dict) or set(grid) - {"env", "args"}:
        return [], {"grid": 'Give {"env": {NAME: [values]}, "args": {"--flag": [values]}}.'}
    axes, errors = [], []
    for kind, pattern in (("env", ENV_NAME_RE), ("args", ARG_NAME_RE)):
        part = grid.get(kind) or {}
        if not isinstance(part, dict):
            errors.append(f"{kind}: give an object of names to lists of values.")
            continue
        for name, values in part.items():
            if not isinstance(name, str) or not pattern.fullmatch(name):
                errors.append(f"{name!r} is not a valid {'variable' if kind == 'env' else 'flag'}.")
                continue
            if (
                not isinstance(values, list)
                or not values
                or len(values) > MAX_VALUES
                or not all(isinstance(v, str | int | float) for v in values)
            ):
                errors.append(f"{name}: give 1 to {MAX_VALUES} values (strings or numbers).")
                continue
            strings = [str(v) for v in values]
            if any("\x00" in v or "\n" in v for v in strings):
                errors.append(f"{name}: values may not contain NUL or line breaks.")
                continue
            axes.append((kind, name, strings))
    if not axes and not errors:
        errors.append("Name at least one parameter to sweep.")
    if errors:
        return [], {"grid": " ".join(errors)}
    count = 1
    for _, _, values in axes:
        count *= len(values)
    if count > MAX_JOBS:
        return [], {"grid": f"That grid makes {count} jobs; a sweep makes at most {MAX_JOBS}."}
    return axes, {}


def sweep_size(*, grid) -> int:
    """How many jobs the grid makes (raises ValidationError as sweep_submit would refuse it)."""
    axes, errors = _clean_grid(grid)
    if errors:
        raise ValidationError(errors)
    return math.prod(len(values) for _, _, values in axes)


def sweep_submit(*, user, team: Team, name: str, spec: dict, grid) -> Sweep:
    """Submit one job per combination of the grid's values, in one transaction: every job is
    validated (and held for approval where the policy says so) or none is made."""
    axes, errors = _clean_grid(grid)
    # The grid's values join the spec's own arguments and environment: those must have their
    # shape first (a number for args, a string for env would fail the joining, not report).
    base_args, base_env, shape_errors = job_args_env_clean(
        args=spec.get("args"), env=spec.get("env")
    )
    errors.update(shape_errors)
    name = " ".join((name or spec.get("name") or "").split())
    if not name:
        errors["name"] = "Give the sweep a name."
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        sweep = Sweep.objects.create(team=team, name=name[:200], owner=user, grid=grid)
        for combination in itertools.product(*[values for _, _, values in axes]):
            env = dict(base_env)
            args = list(base_args)
            label = []
            for (kind, key, _), value in zip(axes, combination, strict=True):
                if kind == "env":
                    env[key] = value
                else:
                    args += [key, value]
                label.append(f"{key}={value}")
            job = job_submit(
                user=user, team=team,
                **{**spec, "name": f"{name} [{' '.join(label)}]"[:200], "env": env, "args": args},
            )  # fmt: skip
            Job.objects.filter(pk=job.pk).update(sweep=sweep)
        audit(actor=user, verb="sweep.submit", obj=sweep, team=team,
              after={"grid": grid, "jobs": sweep.jobs.count()})  # fmt: skip
    return sweep


def sweep_can_cancel(*, user, sweep: Sweep) -> bool:
    """What job_can_cancel says of each of its jobs: they share the sweep's owner and team."""
    return (
        sweep.owner_id == user.pk
        or is_platform_admin(user)
        or user_is_team_lead(user=user, team=sweep.team)
    )


def sweep_cancel(*, user, sweep: Sweep) -> int:
    """Cancel every job of the sweep that has not ended; returns how many."""
    if not sweep_can_cancel(user=user, sweep=sweep):
        raise PermissionDenied("Only the sweep's owner or a lead of its team can cancel it.")
    jobs = list(sweep.jobs.exclude(state__in=Job.FINAL_STATES).select_related("team"))
    cancelled = 0
    for job in jobs:
        try:
            job_cancel(job=job, user=user)
            cancelled += 1
        except TransitionError:  # it ended meanwhile
            continue
    return cancelled
