"""The borrowing and lending ledger: sampling who borrows from whom, and the rate finance sets.

A sample reads a Kueue cluster's admitted workloads (those holding quota: QuotaReserved and not
Finished) and sums, per ClusterQueue (team) and flavor (pool), the units of the pool's GPU
resource they hold. What a team holds beyond its nominal quota it borrowed from its cohort (its
department). Kueue does not say from whom, so the rule is documented here and on the ledger
page: within a department and pool, everything borrowed is attributed to the teams that had
lendable idle quota at that moment (nominal − held, at most the lending limit), in proportion
to it. Borrowed and lent GPU-seconds of a department and pool therefore balance. A department
that shares with the organisation borrows beyond its own teams' idle quota from the other
departments that share: that part is attributed, in the same proportion, to the idle quota
they have left, and the organisation's sharing departments balance per pool.

On a Volcano cluster the same is read from the teams' leaf queues (one per team and pool,
`deserved` = nominal quota): what a queue has allocated of the pool's GPU resource is what the
team holds there, and beyond its nominal quota it borrowed from its department's idle share.

Each sample credits the time since the previous one (at most MAX_GAP: after an outage the
ledger records a gap instead of stretching one sample over it), split at hour boundaries.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from billing.dcgm import HOUR, hour_start
from billing.models import LedgerHour, LedgerRate, LedgerState
from billing.permissions import can_manage_billing
from fleet import kube
from fleet.models import Cluster, GpuPrice
from fleet.services.cluster_health import cluster_may_call
from queues.backends import backend_for
from queues.models import Quota, Team
from queues.services.audit import audit

log = logging.getLogger(__name__)

# A sample credits at most this much time: longer silences are gaps, not borrowing.
MAX_GAP = timedelta(minutes=3)


def _largest_remainder(total: int, weights: dict) -> dict:
    """Split an integer total in proportion to weights, the parts summing to the total."""
    whole = sum(weights.values())
    if not whole or not total:
        return dict.fromkeys(weights, 0)
    exact = {k: Decimal(total) * w / whole for k, w in weights.items()}
    parts = {k: int(v) for k, v in exact.items()}
    short = total - sum(parts.values())
    for k in sorted(exact, key=lambda k: (exact[k] - parts[k], -weights[k]), reverse=True)[:short]:
        parts[k] += 1
    return parts


def borrowing_split(
    *, held: dict[tuple, int], quotas: list[Quota], teams: dict[int, Team]
) -> dict[tuple, tuple[int, int]]:
    """(team id, pool id) → (units borrowed, units lent) at one moment.

    `held` is keyed by (team id, pool id); `quotas` are the pools' quotas. A team borrows what it
    holds above its nominal quota; the department's borrowed total is lent by its teams with
    lendable idle quota, in proportion to it (never more than each one could lend). What a
    department that shares with the organisation borrows beyond its own teams' idle quota is
    lent, in the same proportion, by the idle quota left in the other departments that share
    (Kueue lends through the organisation's Cohort, and says from whom no more than within a
    department)."""
    result: dict[tuple, list[int]] = {}
    nominal = {(q.team_id, q.pool_id): q for q in quotas}
    groups: dict[tuple, list[tuple[int, int]]] = defaultdict(list)  # (dept, pool) → keys
    for team_id, pool_id in set(nominal) | set(held):
        team = teams.get(team_id)
        if team is not None:
            groups[(team.department_id, pool_id)].append((team_id, pool_id))
    # Per pool, across the departments that share: borrowed beyond their own, idle left over.
    wanted: dict[int, int] = defaultdict(int)
    spare: dict[int, dict[tuple, int]] = defaultdict(dict)
    for (_, pool_id), keys in groups.items():
        borrowed = {}
        lendable = {}
        for key in keys:
            quota = nominal.get(key)
            base = quota.nominal_gpus if quota else 0
            use = held.get(key, 0)
            if use > base:
                borrowed[key] = use - base
            elif quota is not None and base > use:
                idle = base - use
                if quota.lending_limit is not None:
                    idle = min(idle, quota.lending_limit)
                if idle:
                    lendable[key] = idle
        total = sum(borrowed.values())
        within = min(total, sum(lendable.values()))
        lent = _largest_remainder(within, lendable)
        for key in set(borrowed) | {k for k, v in lent.items() if v}:
            result[key] = [borrowed.get(key, 0), lent.get(key, 0)]
        if teams[keys[0][0]].department.shares_with_organisation:
            wanted[pool_id] += total - within
            spare[pool_id].update({k: v - lent[k] for k, v in lendable.items() if v > lent[k]})
    for pool_id, total in wanted.items():
        lent = _largest_remainder(min(total, sum(spare[pool_id].values())), spare[pool_id])
        for key, units in lent.items():
            if units:
                result.setdefault(key, [0, 0])[1] += units
    return {k: (v[0], v[1]) for k, v in result.items()}


def _segments(start: datetime, end: datetime):
    """(hour, seconds) pieces of [start, end) split at hour boundaries."""
    while start < end:
        hour = hour_start(start)
        stop = min(end, hour + HOUR)
        seconds = int(round((stop - start).total_seconds()))
        if seconds:
            yield hour, seconds
        start = stop


def ledger_record(*, cluster: Cluster, now: datetime, held: dict[tuple, int]) -> int:
    """Credit the time since the cluster's last sample to its teams' borrowing and lending, as
    `held` shows it now: units of each pool's GPU resource per (team id, pool id), as the
    cluster's scheduler reports them (its backend's quota_held). Returns the number of ledger
    rows touched."""
    teams = {t.pk: t for t in Team.objects.select_related("department")}
    quotas = list(Quota.objects.filter(pool__cluster=cluster))
    split = borrowing_split(held=held, quotas=quotas, teams=teams)
    touched = 0
    with transaction.atomic():
        state, _ = LedgerState.objects.select_for_update().get_or_create(cluster=cluster)
        since = state.last_sample_at
        state.last_sample_at = now
        state.last_error = ""
        state.save(update_fields=["last_sample_at", "last_error"])
        if since is None or since >= now:
            return 0
        since = max(since, now - MAX_GAP)
        for hour, seconds in _segments(since, now):
            for (team_id, pool_id), (borrowed, lent) in sorted(split.items()):
                row, _ = LedgerHour.objects.get_or_create(
                    hour=hour, cluster=cluster, pool_id=pool_id, team_id=team_id
                )
                LedgerHour.objects.filter(pk=row.pk).update(
                    borrowed_seconds=F("borrowed_seconds") + borrowed * seconds,
                    lent_seconds=F("lent_seconds") + lent * seconds,
                    samples=F("samples") + 1,
                )
                touched += 1
    return touched


def ledger_sample_cluster(*, cluster: Cluster, now: datetime | None = None) -> int:
    """Read what each team holds in the cluster (a Kueue cluster's admitted workloads, a Volcano
    cluster's team queues: its backend's quota_held) and record the sample (see
    ledger_record)."""
    now = now or timezone.now()
    client = kube.client_for(cluster)
    try:
        held = backend_for(cluster).quota_held(cluster=cluster, client=client)
    except kube.KubeError as exc:
        LedgerState.objects.update_or_create(
            cluster=cluster, defaults={"last_error": str(exc), "last_error_at": now}
        )
        raise
    return ledger_record(cluster=cluster, now=now, held=held)


def ledger_sample_all(*, now: datetime | None = None) -> dict:
    """Sample every enabled cluster; one that does not answer costs only its own sample."""
    now = now or timezone.now()
    results = {}
    clusters = Cluster.objects.filter(enabled=True, deleted_at__isnull=True)
    for cluster in clusters:
        if not cluster_may_call(cluster=cluster, now=now):
            results[cluster.name] = "skipped: unreachable"
            continue
        try:
            results[cluster.name] = ledger_sample_cluster(cluster=cluster, now=now)
        except kube.KubeError as exc:
            log.warning("ledger sample of %s failed: %s", cluster.name, exc)
            results[cluster.name] = f"error: {exc}"
    return results


def ledger_rate_set(
    *, actor, rate_per_gpu_hour, effective_from: datetime | None = None, note: str = ""
) -> LedgerRate:
    """Set the rate borrowers pay and lenders earn per borrowed GPU-hour, from a moment on (now
    by default). The currency is the price book's: one book, one currency."""
    if not can_manage_billing(actor):
        raise PermissionDenied("Only finance and platform admins set the borrowing rate.")
    errors = {}
    try:
        rate = Decimal(str(rate_per_gpu_hour))
        if not rate.is_finite():
            raise InvalidOperation
    except (InvalidOperation, ValueError, TypeError):
        rate = None
        errors["rate_per_gpu_hour"] = "Enter a number, e.g. 0.50."
    if rate is not None:
        if rate < 0:
            errors["rate_per_gpu_hour"] = "A rate cannot be negative; enter 0 to turn it off."
        elif rate >= Decimal("100000000"):
            errors["rate_per_gpu_hour"] = "Enter a rate below 100,000,000 per GPU-hour."
        elif rate.as_tuple().exponent < -4:
            errors["rate_per_gpu_hour"] = "Use at most four decimal places."
    if len(note) > 200:
        errors["note"] = "Keep the note to 200 characters."
    effective_from = effective_from or timezone.now()
    if LedgerRate.objects.filter(effective_from=effective_from).exists():
        errors["effective_from"] = "A rate already starts at this moment; pick another."
    if errors:
        raise ValidationError(errors)
    rate = rate.quantize(Decimal("0.0001"))
    currency = (
        GpuPrice.objects.order_by("-effective_from").values_list("currency", flat=True).first()
        or "EUR"
    )
    with transaction.atomic():
        before = LedgerRate.objects.filter(effective_from__lte=effective_from).first()
        created = LedgerRate.objects.create(
            rate_per_gpu_hour=rate,
            currency=currency,
            effective_from=effective_from,
            note=note,
            created_by=actor if getattr(actor, "pk", None) else None,
        )
        audit(
            actor=actor,
            verb="ledger.rate",
            obj=created,
            before={"rate_per_gpu_hour": str(before.rate_per_gpu_hour)} if before else None,
            after={
                "rate_per_gpu_hour": str(rate),
                "currency": currency,
                "effective_from": effective_from.isoformat(),
            },
        )
    return created
