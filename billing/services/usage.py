"""Usage ingestion: attribution, Prometheus hours, direct scrapes, reattribution, pod lifetimes.

Over 400 lines: both sources share the attribution and row-finishing code, which stays beside them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from billing import dcgm
from billing.models import IngestState, ScrapeState, UsageHour
from billing.pricing import PriceBook
from billing.services.rollups import usage_days_mark_dirty
from fleet.models import Cluster, GpuModel, GpuPrice, Node
from queues.models import JobPod, Team

log = logging.getLogger(__name__)
SPOT = "spot"  # the profile prefix of usage on spot capacity (and of its prices)


# ---------------------------------------------------------------------------------------------
# Attribution


def normalise_model_name(name: str) -> str:
    """A GPU model name compared loosely: lower case, dashes and underscores as spaces."""
    return " ".join(name.replace("-", " ").replace("_", " ").lower().split())


@dataclass
class Attribution:
    """Lookups that turn a series' pod, namespace, node and model into portal objects."""

    jobpods: dict[tuple[str, str], tuple[int, int]]  # (namespace, pod) → (job id, team id)
    pod_gpus: dict[tuple[str, str], tuple[int, list[str]]]  # (ns, pod) → (JobPod id, GPU UUIDs)
    teams_by_namespace: dict[str, int]
    nodes: dict[str, tuple[int | None, int | None]]  # node → (pool id, gpu model id)
    models: dict[str, int]  # normalised DCGM modelName → GpuModel id
    prices: PriceBook
    replicas: dict[str, int] = field(default_factory=dict)  # time-sliced node → replicas
    spot: set[str] = field(default_factory=set)  # nodes of spot pools

    def profile(self, sid: dcgm.SeriesId) -> str:
        """The row's profile: a MIG profile, "time-slice 1/<replicas>" for a time-sliced GPU's
        replica (each is a 1/replicas share of the GPU, priced as the price book's entry for
        that profile), or "" for a whole GPU; prefixed "spot" on spot capacity, which has its
        own prices ("spot", "spot 1g.10gb")."""
        profile = sid.mig_profile
        if profile == dcgm.TIME_SLICE and self.replicas.get(sid.node):
            profile = f"{dcgm.TIME_SLICE} 1/{self.replicas[sid.node]}"
        if sid.node in self.spot:
            profile = f"{SPOT} {profile}".strip()
        return profile

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
    jobpods, pod_gpus = {}, {}
    if names:
        for pk, ns, name, job_id, team_id, uuids in JobPod.objects.filter(
            name__in=names
        ).values_list("pk", "namespace", "name", "job_id", "job__team_id", "gpu_uuids"):
            if (ns, name) in pods:
                jobpods[(ns, name)] = (job_id, team_id)
                pod_gpus[(ns, name)] = (pk, uuids or [])
    namespaces = {ns for ns, _ in pods}
    teams = dict(Team.objects.filter(namespace__in=namespaces).values_list("namespace", "id"))
    node_names = {u.sid.node for u in usages}
    nodes, replicas, spot = {}, {}, set()
    for name, pool_id, model_id, labels, capacity_type in Node.objects.filter(
        cluster=cluster, name__in=node_names
    ).values_list("name", "pool_id", "pool__gpu_model_id", "labels", "pool__capacity_type"):
        nodes[name] = (pool_id, model_id)
        if capacity_type == SPOT:
            spot.add(name)
        count = str((labels or {}).get("nvidia.com/gpu.replicas", ""))
        if count.isdigit() and int(count) > 1:
            replicas[name] = int(count)
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
    return Attribution(jobpods, pod_gpus, teams, nodes, models, PriceBook(priced), replicas, spot)


def _record_pod_gpus(att: Attribution, usages) -> int:
    """Note on each pod's JobPod the GPUs the DCGM series show it holding: the GPU UUIDs of a
    pod are only known from the metrics (the Kubernetes API does not say which device a
    container got). Returns how many JobPods learned a GPU."""
    held: dict[tuple[str, str], set[str]] = {}
    for usage in usages:
        key = (usage.sid.namespace, usage.sid.pod)
        if key in att.pod_gpus:
            held.setdefault(key, set()).add(usage.sid.gpu_uuid)
    learned = 0
    for key, uuids in held.items():
        pk, known = att.pod_gpus[key]
        if not uuids <= set(known):
            JobPod.objects.filter(pk=pk).update(gpu_uuids=sorted(uuids | set(known)))
            learned += 1
    return learned


def _resolved_fields(att: Attribution, usage: dcgm.HourUsage) -> dict:
    sid = usage.sid
    job_id = team_id = None
    if sid.pod:
        job_id, team_id = att.jobpods.get((sid.namespace, sid.pod), (None, None))
        if team_id is None:
            team_id = att.teams_by_namespace.get(sid.namespace)
    pool_id = att.nodes.get(sid.node, (None, None))[0]
    model_id = att.model_id(sid.model_name, sid.node)
    profile = att.profile(sid)
    return {
        "model_name": sid.model_name[:200],
        "gpu_model_id": model_id,
        "mig_profile": profile,
        "node": sid.node,
        "pool_id": pool_id,
        "namespace": sid.namespace,
        "team_id": team_id,
        "job_id": job_id,
        "flag_unknown_model": not att.has_price(model_id, profile, usage.hour),
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
    else:
        row.energy_joules = None  # no reading: unknown, not zero
    row.flag_stuck_zero = _stuck_zero(row)


_UPDATE_FIELDS = [
    "model_name", "gpu_model", "mig_profile", "node", "pool", "namespace", "team", "job",
    "seconds_allocated", "seconds_idle", "seconds_busy", "util_mean", "memory_used_mib_mean",
    "memory_used_mib_max", "energy_joules", "sample_count", "expected_samples", "flag_gap",
    "flag_stuck_zero", "flag_unknown_model", "source", "util_sum", "busy_sum", "memory_sum",
    "energy_first_mj", "energy_last_mj", "last_sample_at", "updated_at", "exact_times",
    "util_buckets",
]  # fmt: skip
BUCKET_MINUTES = 5  # the grain of a pod's utilisation within an hour (UsageHour.util_buckets)


def util_bucket(at: datetime) -> str:
    """The key of the 5-minute bucket of its hour that a sample taken at `at` falls in (a
    sample on the hour closes the hour before, as scrape_usage credits it)."""
    minute = (at - timedelta(seconds=1)).minute
    return str(minute - minute % BUCKET_MINUTES)


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
        _record_pod_gpus(att, usages)
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


# ---------------------------------------------------------------------------------------------
# Ingestion: direct scrape (incremental, hour in progress included)


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
            if usage.sample_count and usage.sid.pod:
                key = util_bucket(scraped_at)
                total, samples = row.util_buckets.get(key, (0.0, 0))
                added = [total + usage.util_sum, samples + usage.sample_count]
                row.util_buckets = {**row.util_buckets, key: added}
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
        _record_pod_gpus(att, usages)
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
    seen = list(rows.values_list("namespace", "pod", "cluster_id", "hour", "gpu_uuid"))
    keys = {(ns, pod) for ns, pod, *_ in seen}
    if not keys:
        return 0
    found, gpus = {}, {}
    for pk, ns, name, job_id, team_id, uuids in JobPod.objects.filter(
        name__in={p for _, p in keys}
    ).values_list("pk", "namespace", "name", "job_id", "job__team_id", "gpu_uuids"):
        if (ns, name) in keys:
            found[(ns, name)] = (job_id, team_id)
            gpus[(ns, name)] = (pk, set(uuids or []))
    dirty: dict[int, set[datetime]] = {}
    for ns, pod, cluster_id, hour, uuid in seen:
        if (ns, pod) in found:
            dirty.setdefault(cluster_id, set()).add(hour)
            gpus[(ns, pod)][1].add(uuid)
    for pk, uuids in gpus.values():
        JobPod.objects.filter(pk=pk).update(gpu_uuids=sorted(uuids))
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
