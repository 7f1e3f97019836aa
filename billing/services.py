"""Billing writes: usage ingestion and attribution, price book, budgets, month closing."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from billing import dcgm
from billing.models import (
    Budget,
    IngestState,
    MonthlyReport,
    ScrapeState,
    UsageDay,
    UsageDayState,
    UsageHour,
)
from billing.permissions import can_manage_billing
from billing.pricing import PriceBook
from billing.reports import finance_report
from billing.selectors import _hour_sums, team_spend
from fleet.models import Cluster, GpuModel, GpuPrice, Node
from fleet.prices import price_book_version, price_overlaps
from queues.models import JobPod, Team
from queues.roles import is_platform_admin
from queues.services.audit import audit
from queues.services.holds import team_queue_hold

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------
# Attribution


def normalise_model_name(name: str) -> str:
    return " ".join(name.replace("-", " ").replace("_", " ").lower().split())


@dataclass
class Attribution:
    """Lookups that turn a series' pod, namespace, node and model into portal objects."""

    jobpods: dict[tuple[str, str], tuple[int, int]]  # (namespace, pod) → (job id, team id)
    teams_by_namespace: dict[str, int]
    nodes: dict[str, tuple[int | None, int | None]]  # node → (pool id, gpu model id)
    models: dict[str, int]  # normalised DCGM modelName → GpuModel id
    prices: PriceBook

    def model_id(self, model_name: str, node: str) -> int | None:
        found = self.models.get(normalise_model_name(model_name))
        if found is None and node in self.nodes:
            found = self.nodes[node][1]
        return found

    def has_price(self, model_id: int | None, mig_profile: str, hour: datetime) -> bool:
        return self.prices.at(model_id, mig_profile, hour) is not None


def attribution_build(*, cluster: Cluster, usages: list[dcgm.HourUsage]) -> Attribution:
    """Load, in a handful of queries, everything needed to attribute these usages."""
    pods = {(u.sid.namespace, u.sid.pod) for u in usages if u.sid.pod}
    names = {p for _, p in pods}
    jobpods = {}
    if names:
        for ns, name, job_id, team_id in JobPod.objects.filter(name__in=names).values_list(
            "namespace", "name", "job_id", "job__team_id"
        ):
            if (ns, name) in pods:
                jobpods[(ns, name)] = (job_id, team_id)
    namespaces = {ns for ns, _ in pods}
    teams = dict(Team.objects.filter(namespace__in=namespaces).values_list("namespace", "id"))
    node_names = {u.sid.node for u in usages}
    nodes = {
        name: (pool_id, model_id)
        for name, pool_id, model_id in Node.objects.filter(
            cluster=cluster, name__in=node_names
        ).values_list("name", "pool_id", "pool__gpu_model_id")
    }
    models = {}
    for model in GpuModel.objects.all():
        for alias in [model.name, *(model.dcgm_model_names or [])]:
            models[normalise_model_name(alias)] = model.pk
    hours = [u.hour for u in usages]
    priced = []
    if hours:
        priced = GpuPrice.objects.filter(
            Q(effective_to__isnull=True) | Q(effective_to__gt=min(hours)),
            effective_from__lte=max(hours),
        )
    return Attribution(jobpods, teams, nodes, models, PriceBook(priced))


def _resolved_fields(att: Attribution, usage: dcgm.HourUsage) -> dict:
    sid = usage.sid
    job_id = team_id = None
    if sid.pod:
        job_id, team_id = att.jobpods.get((sid.namespace, sid.pod), (None, None))
        if team_id is None:
            team_id = att.teams_by_namespace.get(sid.namespace)
    pool_id = att.nodes.get(sid.node, (None, None))[0]
    model_id = att.model_id(sid.model_name, sid.node)
    return {
        "model_name": sid.model_name[:200],
        "gpu_model_id": model_id,
        "mig_profile": sid.mig_profile,
        "node": sid.node,
        "pool_id": pool_id,
        "namespace": sid.namespace,
        "team_id": team_id,
        "job_id": job_id,
        "flag_unknown_model": not att.has_price(model_id, sid.mig_profile, usage.hour),
    }


def _stuck_zero(row: UsageHour) -> bool:
    threshold = int(settings.BILLING_STUCK_ZERO_SECONDS)
    return (
        bool(row.pod)
        and row.seconds_allocated >= threshold
        and row.busy_sum == 0
        and (row.util_sum == 0)
    )


def _finish(row: UsageHour) -> None:
    total = row.seconds_allocated + row.seconds_idle
    row.seconds_busy = min(total, round(row.busy_sum))
    row.util_mean = row.util_sum / row.sample_count if row.sample_count else 0.0
    row.memory_used_mib_mean = row.memory_sum / row.sample_count if row.sample_count else 0.0
    if row.energy_first_mj is not None and row.energy_last_mj is not None:
        row.energy_joules = max(0.0, (row.energy_last_mj - row.energy_first_mj) / 1000.0)
    row.flag_stuck_zero = _stuck_zero(row)


_UPDATE_FIELDS = [
    "model_name", "gpu_model", "mig_profile", "node", "pool", "namespace", "team", "job",
    "seconds_allocated", "seconds_idle", "seconds_busy", "util_mean", "memory_used_mib_mean",
    "memory_used_mib_max", "energy_joules", "sample_count", "expected_samples", "flag_gap",
    "flag_stuck_zero", "flag_unknown_model", "source", "util_sum", "busy_sum", "memory_sum",
    "energy_first_mj", "energy_last_mj", "last_sample_at", "updated_at", "exact_times",
]  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Daily summaries (derived from UsageHour; what reports read for clean past days)

DAY_KEYS = ("team_id", "job_id", "gpu_model_id", "mig_profile", "pool_id", "model_name")


def usage_days_mark_dirty(*, cluster_id: int, hours) -> None:
    """Note that these hours' days changed, so their UsageDay rows get rebuilt."""
    days = {h.astimezone(UTC).date() for h in hours}
    if not days:
        return
    UsageDayState.objects.bulk_create(
        [UsageDayState(cluster_id=cluster_id, day=day, dirty=True) for day in sorted(days)],
        update_conflicts=True,
        unique_fields=["cluster", "day"],
        update_fields=["dirty"],
    )


def usage_day_refresh(*, cluster_id: int, day: date) -> int:
    """Rebuild one day's UsageDay rows from its UsageHour rows and mark the day clean."""
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)
    with transaction.atomic():
        # Writers mark the day dirty through this row, so they wait for the rebuild to commit
        # and a change made meanwhile leaves the day dirty again.
        state, _ = UsageDayState.objects.select_for_update().get_or_create(
            cluster_id=cluster_id, day=day
        )
        UsageDay.objects.filter(cluster_id=cluster_id, day=day).delete()
        groups = (
            UsageHour.objects.filter(
                cluster_id=cluster_id, hour__gte=start, hour__lt=start + timedelta(days=1)
            )
            .values(*DAY_KEYS)
            .annotate(**_hour_sums())
            .order_by()
        )
        rows = [UsageDay(day=day, cluster_id=cluster_id, **g) for g in groups]
        UsageDay.objects.bulk_create(rows, batch_size=5000)
        state.dirty = False
        state.refreshed_at = timezone.now()
        state.save(update_fields=["dirty", "refreshed_at"])
    return len(rows)


def usage_days_refresh_dirty(*, now: datetime | None = None, limit: int = 62) -> int:
    """Rebuild the summaries of changed past days (today stays hourly until it ends)."""
    today = (now or timezone.now()).astimezone(UTC).date()
    done = 0
    for cluster_id, day in UsageDayState.objects.filter(dirty=True, day__lt=today).values_list(
        "cluster_id", "day"
    )[:limit]:
        usage_day_refresh(cluster_id=cluster_id, day=day)
        done += 1
    return done


# ---------------------------------------------------------------------------------------------
# Ingestion: Prometheus (a closed hour, replaced as a whole)


def usage_hour_replace(*, cluster: Cluster, hour: datetime, usages: list[dcgm.HourUsage]) -> int:
    """Write one hour's usage for a cluster, replacing what an earlier ingestion wrote."""
    att = attribution_build(cluster=cluster, usages=usages)
    now = timezone.now()
    rows = []
    for usage in usages:
        row = UsageHour(
            hour=hour,
            cluster=cluster,
            gpu_uuid=usage.sid.gpu_uuid,
            pod=usage.sid.pod,
            seconds_allocated=usage.seconds if usage.sid.pod else 0,
            seconds_idle=0 if usage.sid.pod else usage.seconds,
            sample_count=usage.sample_count,
            expected_samples=usage.expected_samples,
            util_sum=usage.util_sum,
            busy_sum=usage.busy_seconds,
            memory_sum=usage.memory_sum,
            memory_used_mib_max=round(usage.memory_max),
            energy_first_mj=usage.energy_min_mj,
            energy_last_mj=usage.energy_max_mj,
            flag_gap=usage.gap,
            source=UsageHour.Source.PROMETHEUS,
            last_sample_at=hour + dcgm.HOUR,
            updated_at=now,
            **_resolved_fields(att, usage),
        )
        _finish(row)
        rows.append(row)
    with transaction.atomic():
        keep = {(r.gpu_uuid, r.pod) for r in rows}
        stale = [
            pk
            for pk, uuid, pod in UsageHour.objects.filter(cluster=cluster, hour=hour).values_list(
                "pk", "gpu_uuid", "pod"
            )
            if (uuid, pod) not in keep
        ]
        if stale:
            UsageHour.objects.filter(pk__in=stale).delete()
        usage_days_mark_dirty(cluster_id=cluster.pk, hours=[hour])
        UsageHour.objects.bulk_create(
            rows,
            batch_size=1000,
            update_conflicts=True,
            unique_fields=["hour", "cluster", "gpu_uuid", "pod"],
            update_fields=_UPDATE_FIELDS,
        )
    return len(rows)


def usage_hour_ingest(*, cluster: Cluster, hour: datetime, client=None) -> IngestState:
    """Ingest one closed hour from Prometheus; records success or the error for a retry."""
    hour = dcgm.hour_start(hour)
    try:
        usages, stats = dcgm.prometheus_hour_usage(hour=hour, client=client)
    except dcgm.MetricsError as exc:
        log.warning("billing: ingestion of %s failed: %s", hour, exc)
        state, _ = IngestState.objects.update_or_create(
            cluster=cluster,
            hour=hour,
            defaults={"state": IngestState.State.FAILED, "error": str(exc)[:2000]},
        )
        raise
    count = usage_hour_replace(cluster=cluster, hour=hour, usages=usages)
    usage_pod_lifetimes_apply(since=hour)
    state, _ = IngestState.objects.update_or_create(
        cluster=cluster,
        hour=hour,
        defaults={
            "state": IngestState.State.DONE,
            "rows": count,
            "largest_query_samples": stats["largest_query_samples"],
            "error": "",
        },
    )
    return state


def hours_missing(*, cluster: Cluster, now: datetime | None = None, days: int = 3) -> list:
    """Closed hours of the last `days` days not yet ingested successfully, oldest first."""
    now = now or timezone.now()
    last_closed = dcgm.hour_start(now) - dcgm.HOUR
    first = last_closed - timedelta(days=days) + dcgm.HOUR
    done = set(
        IngestState.objects.filter(
            cluster=cluster, hour__gte=first, state=IngestState.State.DONE
        ).values_list("hour", flat=True)
    )
    hours = []
    h = first
    while h <= last_closed:
        if h not in done:
            hours.append(h)
        h += dcgm.HOUR
    return hours


# ---------------------------------------------------------------------------------------------
# Ingestion: direct scrape (incremental, hour in progress included)


def default_cluster() -> Cluster | None:
    return Cluster.objects.order_by("-is_default", "pk").first()


def usage_scrape_record(
    *, cluster: Cluster, url: str, samples: list[dcgm.GpuSample], scraped_at: datetime
) -> int:
    """Credit one scrape's samples to UsageHour rows; a scrape at or before the last is ignored."""
    with transaction.atomic():
        state, _ = ScrapeState.objects.select_for_update().get_or_create(
            url=url, defaults={"cluster": cluster}
        )
        if state.last_scrape_at is not None and scraped_at <= state.last_scrape_at:
            return 0
        usages, _gap = dcgm.scrape_usage(
            samples, scraped_at=scraped_at, previous_at=state.last_scrape_at
        )
        seen = sorted({s.sid.gpu_uuid for s in samples})
        vanished = set(state.last_gpus or []) - set(seen)
        state.last_scrape_at = scraped_at
        state.last_gpus = seen
        state.last_error = ""
        state.save(update_fields=["last_scrape_at", "last_gpus", "last_error"])
        if vanished:
            # A series that stops while the exporter answers is a gap, not an idle GPU.
            UsageHour.objects.filter(
                cluster=cluster, hour=dcgm.hour_start(scraped_at), gpu_uuid__in=vanished
            ).update(flag_gap=True)
        if not usages:
            return 0
        att = attribution_build(cluster=cluster, usages=usages)
        hours = {u.hour for u in usages}
        uuids = {u.sid.gpu_uuid for u in usages}
        existing = {
            (r.hour, r.gpu_uuid, r.pod): r
            for r in UsageHour.objects.select_for_update().filter(
                cluster=cluster, hour__in=hours, gpu_uuid__in=uuids
            )
        }
        new, changed = [], {}
        for usage in usages:
            key = (usage.hour, usage.sid.gpu_uuid, usage.sid.pod)
            row = existing.get(key)
            if row is None:
                row = UsageHour(
                    hour=usage.hour,
                    cluster=cluster,
                    gpu_uuid=usage.sid.gpu_uuid,
                    pod=usage.sid.pod,
                    source=UsageHour.Source.SCRAPE,
                )
                existing[key] = row
                new.append(row)
            elif row.pk is not None:
                changed[row.pk] = row
            if usage.sid.pod:
                row.seconds_allocated = min(3600, row.seconds_allocated + usage.seconds)
            else:
                row.seconds_idle = min(3600, row.seconds_idle + usage.seconds)
            row.sample_count += usage.sample_count
            row.expected_samples += usage.expected_samples
            row.util_sum += usage.util_sum
            row.busy_sum += usage.busy_seconds
            row.memory_sum += usage.memory_sum
            row.memory_used_mib_max = max(row.memory_used_mib_max, round(usage.memory_max))
            if usage.energy_min_mj is not None:
                if row.energy_first_mj is None:
                    row.energy_first_mj = usage.energy_min_mj
                row.energy_last_mj = usage.energy_max_mj
            row.flag_gap = row.flag_gap or usage.gap
            row.last_sample_at = scraped_at
            for name, value in _resolved_fields(att, usage).items():
                # Keep an attribution found earlier (e.g. a JobPod recorded after the pod began).
                if value is None and name in ("team_id", "job_id", "pool_id", "gpu_model_id"):
                    continue
                setattr(row, name, value)
            _finish(row)
        usage_days_mark_dirty(cluster_id=cluster.pk, hours=hours)
        UsageHour.objects.bulk_create(new, batch_size=1000)
        if changed:
            UsageHour.objects.bulk_update(list(changed.values()), _UPDATE_FIELDS, batch_size=1000)
    return len(usages)


def usage_scrape_failed(*, cluster: Cluster, url: str, error: str) -> None:
    """Remember a failed scrape on its state row (shown to admins; the next scrape retries)."""
    state, _ = ScrapeState.objects.get_or_create(url=url, defaults={"cluster": cluster})
    state.last_error = error[:2000]
    state.last_error_at = timezone.now()
    state.save(update_fields=["last_error", "last_error_at"])


def usage_reattribute(*, since: datetime) -> int:
    """Attach rows seen before their JobPod was recorded to the job and its team."""
    rows = UsageHour.objects.filter(hour__gte=since, job__isnull=True).exclude(pod="")
    seen = list(rows.values_list("namespace", "pod", "cluster_id", "hour"))
    keys = {(ns, pod) for ns, pod, _, _ in seen}
    if not keys:
        return 0
    found = {
        (ns, name): (job_id, team_id)
        for ns, name, job_id, team_id in JobPod.objects.filter(
            name__in={p for _, p in keys}
        ).values_list("namespace", "name", "job_id", "job__team_id")
        if (ns, name) in keys
    }
    dirty: dict[int, set[datetime]] = {}
    for ns, pod, cluster_id, hour in seen:
        if (ns, pod) in found:
            dirty.setdefault(cluster_id, set()).add(hour)
    for cluster_id, hours in dirty.items():
        usage_days_mark_dirty(cluster_id=cluster_id, hours=hours)
    updated = 0
    for (ns, name), (job_id, team_id) in found.items():
        updated += rows.filter(namespace=ns, pod=name).update(job_id=job_id, team_id=team_id)
    return updated


def usage_pod_lifetimes_apply(*, since: datetime) -> int:
    """Set the seconds a finished pod held each GPU from its recorded start and end.

    Samples place a pod's start and end only to within one scrape interval; the pod's own
    timestamps (JobPod.started_at/finished_at, from the container statuses) are exact to the
    second. The seconds moved in or out of a row come from or go to the same GPU-hour's idle
    row, so a GPU never counts more than the hour. Running it again changes nothing.
    """
    rows = list(UsageHour.objects.filter(hour__gte=since, job__isnull=False).exclude(pod=""))
    if not rows:
        return 0
    lifetimes = {
        (job_id, ns, name): (started, finished)
        for job_id, ns, name, started, finished in JobPod.objects.filter(
            job_id__in={r.job_id for r in rows},
            started_at__isnull=False,
            finished_at__isnull=False,
        ).values_list("job_id", "namespace", "name", "started_at", "finished_at")
    }
    changed = 0
    for row in rows:
        life = lifetimes.get((row.job_id, row.namespace, row.pod))
        if life is None:
            continue
        exact = dcgm.seconds_in_hour(life[0], life[1], row.hour)
        delta = exact - row.seconds_allocated
        if delta == 0 and row.exact_times:
            continue
        with transaction.atomic():
            locked = UsageHour.objects.select_for_update().get(pk=row.pk)
            delta = exact - locked.seconds_allocated
            idle = (
                UsageHour.objects.select_for_update()
                .filter(hour=row.hour, cluster_id=row.cluster_id, gpu_uuid=row.gpu_uuid, pod="")
                .first()
            )
            if delta > 0:
                # Only what the samples credited as idle can move to the pod.
                delta = min(delta, idle.seconds_idle if idle else 0)
                if idle is not None:
                    idle.seconds_idle -= delta
                    idle.seconds_busy = min(idle.seconds_busy, idle.seconds_idle)
            elif delta < 0:
                if idle is None:
                    idle = UsageHour(
                        hour=row.hour, cluster_id=row.cluster_id, gpu_uuid=row.gpu_uuid, pod="",
                        model_name=row.model_name, gpu_model_id=row.gpu_model_id,
                        mig_profile=row.mig_profile, node=row.node, pool_id=row.pool_id,
                        flag_unknown_model=row.flag_unknown_model, source=row.source,
                    )  # fmt: skip
                idle.seconds_idle = min(3600, idle.seconds_idle - delta)
            locked.seconds_allocated += delta
            locked.seconds_busy = min(locked.seconds_busy, locked.seconds_allocated)
            locked.exact_times = locked.seconds_allocated == exact
            locked.save(update_fields=["seconds_allocated", "seconds_busy", "exact_times"])
            if idle is not None and delta:
                idle.save()
            usage_days_mark_dirty(cluster_id=row.cluster_id, hours=[row.hour])
        changed += 1
    return changed


# ---------------------------------------------------------------------------------------------
# Price book


def _check_price_editor(user) -> None:
    if not can_manage_billing(user):
        raise PermissionError("Only finance and platform admins edit the price book.")


def gpu_price_create(
    *,
    actor,
    gpu_model: GpuModel,
    price_per_hour: Decimal,
    effective_from: datetime,
    effective_to: datetime | None = None,
    currency: str = "EUR",
    mig_profile: str = "",
    note: str = "",
    close_previous: bool = True,
) -> GpuPrice:
    """Add a price; an open-ended price in force at `effective_from` is ended there."""
    _check_price_editor(actor)
    errors = {}
    if price_per_hour is None or price_per_hour < 0:
        errors["price_per_hour"] = "The price must be zero or more."
    if effective_to is not None and effective_to <= effective_from:
        errors["effective_to"] = "The end must be after the start."
    if len(currency or "") != 3 or not currency.isalpha():
        errors["currency"] = "Use a three-letter ISO 4217 code, e.g. EUR."
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        previous = None
        if close_previous:
            previous = (
                GpuPrice.objects.select_for_update()
                .filter(
                    gpu_model=gpu_model,
                    mig_profile=mig_profile,
                    effective_to__isnull=True,
                    effective_from__lt=effective_from,
                )
                .first()
            )
            if previous is not None:
                previous.effective_to = effective_from
                previous.save(update_fields=["effective_to"])
        clash = price_overlaps(
            gpu_model=gpu_model,
            mig_profile=mig_profile,
            effective_from=effective_from,
            effective_to=effective_to,
        ).first()
        if clash is not None:
            raise ValidationError(
                {
                    "effective_from": f"Overlaps the price {clash.price_per_hour} "
                    f"{clash.currency}/h in force from {clash.effective_from:%Y-%m-%d %H:%M}."
                }
            )
        try:
            with transaction.atomic():
                price = GpuPrice.objects.create(
                    gpu_model=gpu_model,
                    mig_profile=mig_profile,
                    price_per_hour=price_per_hour,
                    currency=currency.upper(),
                    effective_from=effective_from,
                    effective_to=effective_to,
                    note=note,
                    created_by=actor if getattr(actor, "pk", None) else None,
                )
        except IntegrityError as exc:
            # Another editor's overlapping price committed first (the exclusion constraint).
            raise ValidationError(
                {"effective_from": "Another price for this period was just saved; reload."}
            ) from exc
        audit(
            actor=actor,
            verb="price.create",
            obj=price,
            before={"previous_id": previous.pk} if previous else None,
            after={
                "gpu_model": gpu_model.name,
                "mig_profile": mig_profile,
                "price_per_hour": str(price.price_per_hour),
                "currency": price.currency,
                "effective_from": effective_from.isoformat(),
                "effective_to": effective_to.isoformat() if effective_to else None,
            },
        )
    return price


# ---------------------------------------------------------------------------------------------
# Budgets


def month_start(value: date | datetime) -> date:
    return date(value.year, value.month, 1)


def next_month(month: date) -> date:
    return date(month.year + (month.month == 12), month.month % 12 + 1, 1)


def budget_set(
    *,
    actor,
    team: Team,
    month: date,
    amount: Decimal,
    kind: str = Budget.Kind.CURRENCY,
    currency: str = "EUR",
    thresholds: list[int] | None = None,
    enforce: bool = False,
) -> Budget:
    """Create or change a team's budget for a month; raising it releases a hold it caused."""
    if not can_manage_billing(actor):
        raise PermissionError("Only finance and platform admins set budgets.")
    errors = {}
    if amount is None or amount < 0:
        errors["amount"] = "The amount must be zero or more."
    if kind not in Budget.Kind.values:
        errors["kind"] = f"Choose one of: {', '.join(Budget.Kind.values)}."
    thresholds = sorted(set(thresholds or [50, 80, 100]))
    if any(not isinstance(t, int) or t <= 0 or t > 1000 for t in thresholds):
        errors["thresholds"] = "Thresholds are whole percentages between 1 and 1000."
    if errors:
        raise ValidationError(errors)
    month = month_start(month)
    with transaction.atomic():
        budget = Budget.objects.select_for_update().filter(team=team, month=month).first()
        before = None
        if budget is None:
            budget = Budget(team=team, month=month, created_by=actor)
        else:
            before = {"amount": str(budget.amount), "kind": budget.kind, "enforce": budget.enforce}
        raised = budget.pk is not None and amount > budget.amount
        budget.amount = amount
        budget.kind = kind
        budget.currency = currency.upper()
        budget.thresholds = thresholds
        budget.enforce = enforce
        if raised or budget.pk is None:
            # Alerts repeat against the new amount.
            budget.alerts_sent = []
        budget.save()
        audit(
            actor=actor,
            verb="budget.set",
            obj=budget,
            team=team,
            before=before,
            after={"amount": str(amount), "kind": kind, "enforce": enforce},
        )
    budget_check(budget=budget)
    return budget


def budget_check(*, budget: Budget, now: datetime | None = None) -> dict:
    """Compare spend with the budget: send due alerts, hold or release the team's queue."""
    now = now or timezone.now()
    spent = team_spend(team=budget.team, month=budget.month, kind=budget.kind)
    percent = (spent / budget.amount * 100) if budget.amount else Decimal(100 if spent else 0)
    due = [t for t in budget.thresholds if percent >= t and t not in budget.alerts_sent]
    current_month = month_start(now) == budget.month
    hold = budget.enforce and current_month and percent >= 100
    changed_hold = hold != budget.held
    with transaction.atomic():
        locked = Budget.objects.select_for_update().get(pk=budget.pk)
        locked.last_spent = spent.quantize(Decimal("0.01"))
        locked.last_checked_at = now
        if due:
            locked.alerts_sent = sorted(set(locked.alerts_sent) | set(due))
        locked.held = hold
        locked.save(update_fields=["last_spent", "last_checked_at", "alerts_sent", "held"])
        if due:
            audit(
                actor=None,
                verb="budget.alert",
                obj=locked,
                team=locked.team,
                after={"thresholds": due, "spent": str(locked.last_spent)},
                message=f"{locked.team} reached {max(due)} % of its {locked.month:%B %Y} budget.",
            )
    budget.refresh_from_db()
    if due:
        _budget_alert_mail(budget=budget, threshold=max(due), spent=spent)
    if changed_hold:
        _budget_hold(budget=budget, hold=hold)
    return {"spent": spent, "percent": percent, "alerts": due, "held": hold}


def _budget_alert_mail(*, budget: Budget, threshold: int, spent: Decimal) -> None:
    team = budget.team
    recipients = list(
        team.memberships.filter(role="lead")
        .exclude(user__email="")
        .values_list("user__email", flat=True)
    )
    recipients += list(team.department.managers.exclude(email="").values_list("email", flat=True))
    if not recipients:
        return
    send_mail(
        subject=f"[Quartermaster] {team.name} has used {threshold} % of its budget",
        message=(
            f"{team.name} has spent {spent.quantize(Decimal('0.01'))} {budget.unit} of its "
            f"{budget.amount} {budget.unit} budget for {budget.month:%B %Y}.\n"
            + ("Its queue is held until the budget is raised.\n" if budget.held else "")
            + f"{settings.PORTAL_URL}/billing/teams/{team.slug}/"
        ),
        from_email=None,
        recipient_list=sorted(set(recipients)),
        fail_silently=True,
    )


def _budget_hold(*, budget: Budget, hold: bool) -> None:
    team = budget.team
    if hold:
        reason = f"Budget for {budget.month:%B %Y} spent ({budget.amount} {budget.unit})."
    else:
        if not team.queue_hold_reason.startswith("Budget for"):
            return  # someone else holds the queue; not ours to release
        reason = None
    team_queue_hold(team=team, reason=reason, actor=None)


def budgets_release_past(*, now: datetime | None = None) -> int:
    """Release holds of budgets from months that have ended (the month turned)."""
    now = now or timezone.now()
    released = 0
    for budget in Budget.objects.select_related("team").filter(
        held=True, month__lt=month_start(now)
    ):
        Budget.objects.filter(pk=budget.pk).update(held=False)
        _budget_hold(budget=budget, hold=False)
        released += 1
    return released


# ---------------------------------------------------------------------------------------------
# Monthly reports


def report_close(*, actor, month: date) -> MonthlyReport:
    """Freeze the month's report: a snapshot priced with the current price-book version."""
    if not can_manage_billing(actor):
        raise PermissionError("Only finance and platform admins close a month.")
    month = month_start(month)
    if next_month(month) > timezone.now().date():
        raise ValidationError({"month": "A month can be closed once it has ended."})
    snapshot = finance_report(month=month)
    with transaction.atomic():
        report, _ = MonthlyReport.objects.select_for_update().get_or_create(month=month)
        if report.state == MonthlyReport.State.CLOSED:
            return report
        report.snapshot = snapshot
        report.price_book_version = price_book_version()
        report.state = MonthlyReport.State.CLOSED
        report.closed_by = actor
        report.closed_at = timezone.now()
        report.save()
        audit(
            actor=actor,
            verb="report.close",
            obj=report,
            after={"price_book_version": report.price_book_version},
        )
    return report


def report_reopen(*, actor, month: date, reason: str = "") -> MonthlyReport:
    """Reopen a closed month (admins only); leaves an audit event with the old snapshot's total."""
    if not is_platform_admin(actor):
        raise PermissionError("Only a platform admin reopens a closed month.")
    with transaction.atomic():
        report = MonthlyReport.objects.select_for_update().filter(month=month_start(month)).first()
        if report is None or report.state != MonthlyReport.State.CLOSED:
            raise ValidationError({"month": "This month is not closed."})
        before = {
            "price_book_version": report.price_book_version,
            "closed_at": report.closed_at.isoformat() if report.closed_at else None,
            "total_cost": (report.snapshot or {}).get("totals", {}).get("cost"),
        }
        report.state = MonthlyReport.State.OPEN
        report.snapshot = None
        report.closed_at = None
        report.reopened_by = actor
        report.reopened_at = timezone.now()
        report.save()
        audit(actor=actor, verb="report.reopen", obj=report, before=before, message=reason)
    return report
