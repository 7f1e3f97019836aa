"""Who may run what-ifs and see them, and a proposal checked entry by entry into its stored form."""

from __future__ import annotations

import logging

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from core.roles import is_manager, is_platform_admin
from fleet.models import NodePool
from planning.models import WhatIfRun
from planning.services.whatif.runs import runs_dispatch
from queues.manifests.quotas import (
    fair_share_weight_text,
)
from queues.models import (
    Department,
    Job,
    PriorityTier,
    Team,
)
from queues.services.audit import audit
from queues.services.fair_share import (
    parse_fair_share_weight,
)

S = Job.State
log = logging.getLogger(__name__)
MAX_DAYS = 62
MAX_GPUS = 100_000
INT32 = 2**31 - 1


# -- who may ------------------------------------------------------------------------------------


def whatif_teams(*, user):
    """Teams whose quota the user may propose changes to: platform admins all, managers their
    departments'."""
    if is_platform_admin(user):
        return Team.objects.select_related("department")
    return Team.objects.select_related("department").filter(department__managers=user)


def whatif_runs(*, user):
    """Runs the user may see: admins all, managers their own, nobody else any."""
    runs = WhatIfRun.objects.select_related("created_by")
    if is_platform_admin(user):
        return runs
    return runs.filter(created_by=user) if is_manager(user) else runs.none()


def _require(user) -> None:
    if not (is_manager(user) or is_platform_admin(user)):
        raise PermissionDenied("What-if runs are for department managers and platform admins.")


# -- the proposal --------------------------------------------------------------------------------


def _limit(value, name: str, errors: dict, *, allow_none: bool, top: int = MAX_GPUS):
    if value is None or value == "":
        if allow_none:
            return None
        errors[name] = "Enter a number."
        return None
    if isinstance(value, bool):
        errors[name] = f"Enter a whole number from 0 to {top}."
        return None
    try:
        number = int(str(value).strip())
    except ValueError:
        errors[name] = f"Enter a whole number from 0 to {top}."
        return None
    if not 0 <= number <= top:
        errors[name] = f"Enter a whole number from 0 to {top}."
        return None
    return number


def proposal_clean(
    *, user, quotas=(), pool_sizes=(), tiers=(), weights=(), fair_sharing=None,
    member_fair_sharing=(), departments=(),
) -> dict:  # fmt: skip
    """The proposal in stored form (pool and team by id), or a ValidationError naming each
    entry that is wrong and how. `weights`: fair-sharing weights per team; `fair_sharing`:
    replay the proposal with Kueue's fair sharing on (True) or off (False) instead of as each
    cluster runs it (None); `member_fair_sharing`: teams that share their queue fairly among
    their members (True) or stop (False); `departments` (platform admins): departments that
    share idle GPUs with the organisation or stop (`shares_with_organisation`), and their
    fair-sharing weight there (`weight`)."""
    errors: dict = {}
    teams = {t.slug: t for t in whatif_teams(user=user)}
    pools = {p.pk: p for p in NodePool.objects.select_related("cluster")}
    clean: dict = {"quotas": [], "pool_sizes": [], "tiers": [], "weights": []}
    seen = set()
    for i, q in enumerate(quotas or []):
        where = f"quotas[{i}]"
        if not isinstance(q, dict):
            errors[where] = "Give an object with team, pool and nominal_gpus."
            continue
        team = teams.get(str(q.get("team", "")))
        pool = pools.get(q.get("pool")) if type(q.get("pool")) is int else None
        if team is None:
            errors[f"{where}.team"] = "Name a team of a department you manage."
        if pool is None:
            errors[f"{where}.pool"] = "Give a pool id."
        nominal = _limit(q.get("nominal_gpus"), f"{where}.nominal_gpus", errors, allow_none=False)
        borrowing = _limit(
            q.get("borrowing_limit"), f"{where}.borrowing_limit", errors, allow_none=True
        )
        lending = _limit(q.get("lending_limit"), f"{where}.lending_limit", errors, allow_none=True)
        if lending is not None and nominal is not None and lending > nominal:
            errors[f"{where}.lending_limit"] = "A team cannot lend more than its nominal quota."
        if team and pool:
            if (team.pk, pool.pk) in seen:
                errors[where] = "This team and pool are listed twice."
            seen.add((team.pk, pool.pk))
            clean["quotas"].append({
                "team": team.pk, "pool": pool.pk, "nominal_gpus": nominal,
                "borrowing_limit": borrowing, "lending_limit": lending,
            })  # fmt: skip
    for i, p in enumerate(pool_sizes or []):
        where = f"pool_sizes[{i}]"
        pool = (
            pools.get(p.get("pool")) if isinstance(p, dict) and type(p.get("pool")) is int else None
        )
        if pool is None:
            errors[f"{where}.pool"] = "Give a pool id."
            continue
        gpus = _limit(p.get("gpus"), f"{where}.gpus", errors, allow_none=False)
        clean["pool_sizes"].append({"pool": pool.pk, "gpus": gpus})
    tier_ids = dict(PriorityTier.objects.values_list("name", "pk"))
    for i, t in enumerate(tiers or []):
        where = f"tiers[{i}]"
        tier = tier_ids.get(str(t.get("tier", ""))) if isinstance(t, dict) else None
        if tier is None:
            errors[f"{where}.tier"] = "Name a priority tier."
            continue
        value = t.get("value")
        if isinstance(value, bool) or not isinstance(value, int) or abs(value) > INT32:
            errors[f"{where}.value"] = "Enter a whole number (a 32-bit priority)."
            continue
        clean["tiers"].append({"tier": tier, "value": value})
    mine = "Name a team of a department you manage."
    for where, team, w in _named("weights", weights, "team", teams, mine, errors):
        try:
            weight = parse_fair_share_weight(w.get("weight"))
        except ValidationError as exc:
            errors[f"{where}.weight"] = exc.message_dict["weight"][0]
            continue
        clean["weights"].append({"team": team.pk, "weight": fair_share_weight_text(weight)})
    clean["member_fair_sharing"] = []
    for where, team, m in _named("member_fair_sharing", member_fair_sharing, "team", teams, mine,
                                 errors):  # fmt: skip
        if not isinstance(m.get("enabled"), bool):
            errors[f"{where}.enabled"] = "Give true or false."
            continue
        clean["member_fair_sharing"].append({"team": team.pk, "enabled": m["enabled"]})
    clean["departments"] = _departments_clean(user, departments, errors)
    if fair_sharing is not None and not isinstance(fair_sharing, bool):
        errors["fair_sharing"] = "Give true, false, or null to replay as each cluster runs."
    elif fair_sharing is not None:
        clean["fair_sharing"] = fair_sharing
    if errors:
        raise ValidationError(errors)
    return clean


def _named(field: str, items, key: str, known: dict, missing: str, errors: dict):
    """(where, object, entry) for each entry of a proposal's list whose `key` names one of
    `known` (by slug), once; an error saying what to fix for the others."""
    seen = set()
    for i, entry in enumerate(items or []):
        where = f"{field}[{i}]"
        found = known.get(str(entry.get(key, ""))) if isinstance(entry, dict) else None
        if found is None:
            errors[f"{where}.{key}"] = missing
            continue
        if found.pk in seen:
            errors[where] = f"This {key} is listed twice."
        seen.add(found.pk)
        yield where, found, entry


def _departments_clean(user, departments, errors: dict) -> list[dict]:
    """The proposal's department entries in stored form: {department id,
    shares_with_organisation (or None: as today), weight (text, or None: as today)}."""
    if not departments:
        return []
    if not is_platform_admin(user):
        errors["departments"] = (
            "Only platform admins propose how departments share idle GPUs across the organisation."
        )
        return []
    by_slug = {d.slug: d for d in Department.objects.all()}
    out = []
    for where, department, d in _named("departments", departments, "department", by_slug,
                                       "Name a department by its slug.", errors):  # fmt: skip
        shares, weight = d.get("shares_with_organisation"), d.get("weight")
        if shares is not None and not isinstance(shares, bool):
            errors[f"{where}.shares_with_organisation"] = "Give true or false."
            continue
        if weight is not None:
            try:
                weight = fair_share_weight_text(parse_fair_share_weight(weight))
            except ValidationError as exc:
                errors[f"{where}.weight"] = exc.message_dict["weight"][0]
                continue
        if shares is None and weight is None:
            errors[where] = "Give shares_with_organisation, weight, or both."
            continue
        out.append({"department": department.pk, "shares_with_organisation": shares,
                    "weight": weight})  # fmt: skip
    return out


def whatif_create(*, actor, name: str = "", days: int = 30, **proposal) -> WhatIfRun:
    """Record a what-if run and queue its replay."""
    _require(actor)
    errors = {}
    if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= MAX_DAYS:
        errors["days"] = f"Replay from 1 to {MAX_DAYS} days."
    name = (name or "").strip()
    if len(name) > 200:
        errors["name"] = "Keep the name to 200 characters."
    try:
        clean = proposal_clean(user=actor, **proposal)
    except ValidationError as exc:
        errors.update(exc.message_dict)
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        run = WhatIfRun.objects.create(
            name=name or f"Proposal of {timezone.now():%Y-%m-%d %H:%M}", created_by=actor,
            days=days, proposal=clean,
        )  # fmt: skip
        audit(actor=actor, verb="whatif.create", obj=run, after=clean)
        transaction.on_commit(lambda: runs_dispatch([run.pk]))
    return run
