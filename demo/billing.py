"""Demo billing data: the price book (whole GPUs, a MIG profile, time-slices, spot), the usage
of the demo's history (demo.history) as DCGM would have reported it, hour by hour, and this
month's budgets, sized from that history so that each team starts at a plausible share of its
budget (none spent, no queue held). Idempotent.

The usage rows are those of the GPUs on the nodes of kubesim/fleets/demo.yaml that the history
ran on (same node names; GPU UUIDs of the demo's own making): each history pod's seconds on its
GPUs, and the rest of every hour as idle capacity, up to the hour in progress, which the live
scrape of kubesim takes over.
"""

from __future__ import annotations

import hashlib
import math
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.utils import timezone

from billing.dcgm import hour_start
from billing.models import (
    Budget,
    CarbonIntensityHour,
    EnergySettings,
    GpuFault,
    GpuFaultCredit,
    GpuHealth,
    GpuHealthEvent,
    TeamBillingPolicy,
    UsageHour,
)
from billing.periods import month_bounds, month_start
from billing.selectors.usage import team_spend
from billing.services.gpufaults.contain import gpu_fault_credit_terms
from billing.services.rollups import usage_day_refresh
from billing.services.usage import SPOT
from demo.fleet import CLUSTER_NAME, NODES, TIME_SLICES
from demo.history import HISTORY_KEY, UTILISATION, gpu_uuid
from fleet.models import Cluster, GpuModel, GpuPrice, NodePool
from queues.models import Job, JobPod, Team

# (GPU model, profile): [(price per hour, in force from)], EUR; a None start is the middle of
# last month (A100 got cheaper then). Profiles: a MIG instance's, a time-slice of a shared GPU
# ("time-slice 1/<replicas>": a quarter of the L4's price), spot capacity's.
PRICES = {
    ("A100-SXM4-80GB", ""): [("3.2000", datetime(2025, 1, 1, tzinfo=UTC)), ("2.9000", None)],
    ("A100-SXM4-80GB", "1g.10gb"): [("0.4500", datetime(2025, 1, 1, tzinfo=UTC))],
    ("H100-80GB-HBM3", ""): [("4.5000", datetime(2025, 1, 1, tzinfo=UTC))],
    ("L4", ""): [("0.8000", datetime(2025, 1, 1, tzinfo=UTC))],
    ("L4", f"time-slice 1/{TIME_SLICES}"): [("0.2000", datetime(2025, 1, 1, tzinfo=UTC))],
    ("L4", SPOT): [("0.3200", datetime(2025, 1, 1, tzinfo=UTC))],
    ("L40S", ""): [("1.6000", datetime(2025, 1, 1, tzinfo=UTC))],
}
# DCGM modelName: (idle W, full-load W), the power the demo's usage rows draw (as kubesim's
# exporter models it: idle plus the load's share of the rest).
POWER = {
    "NVIDIA A100-SXM4-80GB": (60, 400),
    "NVIDIA H100 80GB HBM3": (70, 700),
    "NVIDIA L4": (16, 72),
}
# Share of held GPU-hours whose exporter gave no energy reading (shown as "not measured").
UNMEASURED_SHARE = 0.01
# The demo site's grid: a constant, and an hourly series over the last days (lower at midday
# when the sun shines), gCO2e/kWh.
GRID_INTENSITY = Decimal("350.0")
SERIES_DAYS = 7

# pool: DCGM modelName of its GPUs (the history's pools: whole GPUs and spot).
DCGM_NAMES = {
    "a100": "NVIDIA A100-SXM4-80GB",
    "h100": "NVIDIA H100 80GB HBM3",
    "l4": "NVIDIA L4",
    "l4-spot": "NVIDIA L4",
}
# Where each team's spend stands this month, as a share of its budget, were the month to go on
# as it went so far: most are on course, robotics (whose budget holds its queue when spent) is
# the tightest, still below its 100 % when the demo starts.
ON_COURSE = {"vision": 0.85, "nlp": 0.7, "speech": 0.55, "recsys": 0.6, "robotics": 0.92}
ENFORCED = ("robotics",)


def _unit(seed: str) -> float:
    return int.from_bytes(hashlib.sha256(seed.encode()).digest()[:4], "big") / 2**32


@transaction.atomic
def seed_billing(*, now: datetime | None = None) -> dict:
    """Prices, the history's usage rows, and this month's budgets for the demo teams."""
    now = now or timezone.now()
    prices = _seed_prices(change_at=month_bounds(month_start(month_start(now) - timedelta(1)))[0]
                          + timedelta(days=14))  # fmt: skip
    teams = {t.slug: t for t in Team.objects.filter(slug__in=ON_COURSE)}
    if "recsys" in teams:
        TeamBillingPolicy.objects.get_or_create(
            team=teams["recsys"], defaults={"basis": "blend", "blend_weight": Decimal("0.700")}
        )
    rows = _seed_usage(end=hour_start(now))
    budgets = _seed_budgets(teams=teams, now=now)
    carbon = _seed_carbon(now=now)
    faults = _seed_gpu_fault(now=now)
    return {"prices": prices, "budgets": budgets, "usage_rows": rows, "carbon_hours": carbon,
            "gpu_faults": faults}  # fmt: skip


def _seed_gpu_fault(*, now: datetime) -> int:
    """A GPU that failed last month under a failed A100 job of the history: its fault (the
    node tainted, then returned to service two hours later by the demo's admin), the GPU's
    health history, and the credit of the GPU-hours the job lost, at the price book's price."""
    cluster = Cluster.objects.filter(name=CLUSTER_NAME).first()
    if cluster is None or GpuFault.objects.filter(cluster=cluster).exists():
        return 0
    last = month_bounds(month_start(month_start(now) - timedelta(1)))
    pod = (
        JobPod.objects.filter(
            job__idempotency_key__startswith=HISTORY_KEY, job__state=Job.State.FAILED,
            node_name__startswith="a100-node-", finished_at__gte=last[0],
            finished_at__lt=last[1], started_at__isnull=False,
        ).exclude(gpu_uuids=[]).select_related("job__team", "job__pool").order_by("finished_at")
    ).first()  # fmt: skip
    if pod is None:
        return 0
    job, at = pod.job, pod.finished_at
    uuid_ = pod.gpu_uuids[0]
    index = _node_uuids(pod.node_name).index(uuid_)
    reason = "XID 79 reported by the driver"
    admin = get_user_model().objects.filter(is_superuser=True).order_by("pk").first()
    back = at + timedelta(hours=2)
    fault = GpuFault.objects.create(
        cluster=cluster, node_name=pod.node_name, gpu_uuid=uuid_, gpu_index=index,
        model_name=DCGM_NAMES["a100"], xid=79, reason=reason, detected_at=at,
        pods=[[pod.namespace, pod.name]], state=GpuFault.State.RETURNED, tainted_at=at,
        contained_at=at, return_requested_by=admin, returned_at=back,
        return_reason="GPU reseated; burn-in passed",
    )  # fmt: skip
    for gpu, u in enumerate(_node_uuids(pod.node_name)):
        GpuHealth.objects.get_or_create(cluster=cluster, gpu_uuid=u, defaults={
            "node_name": pod.node_name, "gpu_index": gpu, "model_name": DCGM_NAMES["a100"],
            "observed_at": now, "state_since": back if gpu == index else now,
        })  # fmt: skip
    GpuHealthEvent.objects.bulk_create([
        GpuHealthEvent(cluster=cluster, node_name=pod.node_name, gpu_uuid=uuid_,
                       gpu_index=index, at=at, state=GpuHealth.State.FAILED, reason=reason),
        GpuHealthEvent(cluster=cluster, node_name=pod.node_name, gpu_uuid=uuid_,
                       gpu_index=index, at=back, state=GpuHealth.State.HEALTHY,
                       reason=f"returned to service by {admin}: GPU reseated; burn-in passed"),
    ])  # fmt: skip
    GpuFaultCredit.objects.create(
        fault=fault, job=job, team=job.team, stopped_at=at, notified_at=at,
        **gpu_fault_credit_terms(job=job, fault=fault),
    )  # fmt: skip
    return 1


def _seed_carbon(*, now: datetime) -> int:
    """The site's grid carbon intensity (the default PUE stays) and a week's hourly series,
    unless an admin set them already."""
    if not EnergySettings.objects.exists():
        EnergySettings.objects.create(pk=1, grams_per_kwh=GRID_INTENSITY)
    if CarbonIntensityHour.objects.exists():
        return 0
    end = hour_start(now)
    hours = [end - timedelta(hours=h) for h in range(SERIES_DAYS * 24)]
    CarbonIntensityHour.objects.bulk_create([
        CarbonIntensityHour(hour=h, grams_per_kwh=round(
            float(GRID_INTENSITY) - 150 * max(0.0, math.cos((h.hour - 13) / 12 * math.pi))
            + 40 * (_unit(f"grid/{h:%j%H}") - 0.5), 1))
        for h in hours
    ])  # fmt: skip
    return len(hours)


def _seed_prices(*, change_at: datetime) -> int:
    created = 0
    for (model_name, profile), steps in PRICES.items():
        model = GpuModel.objects.filter(name=model_name).first()
        if model is None or model.prices.filter(mig_profile=profile).exists():
            continue
        for i, (price, start) in enumerate(steps):
            start = start or change_at
            end = steps[i + 1][1] or change_at if i + 1 < len(steps) else None
            GpuPrice.objects.create(
                gpu_model=model, mig_profile=profile, price_per_hour=Decimal(price),
                effective_from=start, effective_to=end, note="demo price book",
            )  # fmt: skip
            created += 1
    return created


def _seed_budgets(*, teams: dict, now: datetime) -> int:
    """This month's budget of each team, unless it has one: what it spends in a month at the
    pace of its history (this month so far, else last month), over its ON_COURSE share."""
    this_month = month_start(now)
    last_month = month_start(this_month - timedelta(days=1))
    start, end = month_bounds(this_month)
    elapsed = max(0.0, (now - start) / (end - start))
    finance = get_user_model().objects.filter(groups__name="finance").first()
    made = 0
    for slug, team in teams.items():
        if Budget.objects.filter(team=team, month=this_month).exists():
            continue
        so_far = team_spend(team=team, month=this_month)
        pace = so_far / Decimal(elapsed) if elapsed >= 0.2 else Decimal(0)
        monthly = max(pace, team_spend(team=team, month=last_month), Decimal(100))
        amount = Decimal(math.ceil(monthly / Decimal(str(ON_COURSE[slug])) / 100) * 100)
        Budget.objects.create(
            team=team, month=this_month, amount=amount, thresholds=[50, 80, 100],
            enforce=slug in ENFORCED, created_by=finance,
        )  # fmt: skip
        made += 1
    return made


def _seed_usage(*, end: datetime) -> int:
    """UsageHour rows for the history's GPUs from its first hour to `end`: the seconds each pod
    held its GPUs, and the rest idle; then the daily rollups."""
    cluster = Cluster.objects.filter(name=CLUSTER_NAME).first()
    history = Job.objects.filter(idempotency_key__startswith=HISTORY_KEY)
    if cluster is None or not history.exists():
        return 0
    first = (history.filter(started_at__isnull=False).order_by("started_at")
             .values_list("started_at", flat=True).first())  # fmt: skip
    start = hour_start(first)
    if UsageHour.objects.filter(cluster=cluster, hour=start, gpu_uuid__in=[
            gpu_uuid(f"{p}-node-0", 0) for p in DCGM_NAMES]).exists():  # fmt: skip
        return 0
    pools = {p.name: p for p in NodePool.objects.filter(cluster=cluster, name__in=DCGM_NAMES)}
    models = {m.name: m for m in GpuModel.objects.all()}
    by_dcgm = {n: m for m in models.values() for n in (m.dcgm_model_names or [])}
    held: dict[tuple[str, int, datetime], list] = defaultdict(list)  # (node, GPU, hour) -> pods
    pods = JobPod.objects.filter(job__in=history, started_at__lt=end).select_related("job__team")
    for pod in pods:
        index = {u: i for i, u in enumerate(_node_uuids(pod.node_name))}
        t = pod.started_at
        while t < min(pod.finished_at, end):
            hour = hour_start(t)
            step = min(pod.finished_at, hour + timedelta(hours=1), end)
            for uuid_ in pod.gpu_uuids:
                held[(pod.node_name, index[uuid_], hour)].append(
                    (pod, int((step - t).total_seconds()))
                )
            t = step
    rows = []
    for pool_name, pool in pools.items():
        nodes, per_node = NODES[pool_name]
        dcgm_name = DCGM_NAMES[pool_name]
        profile = SPOT if pool.capacity_type == NodePool.CapacityType.SPOT else ""
        for n in range(nodes):
            node = f"{pool_name}-node-{n}"
            for g in range(per_node):
                uuid_ = gpu_uuid(node, g)
                hour = start
                while hour < end:
                    busy = 0
                    for pod, seconds in held.get((node, g, hour), []):
                        util = _util(pod, hour)
                        rows.append(_row(
                            hour=hour, cluster=cluster, uuid_=uuid_, dcgm_name=dcgm_name,
                            model=by_dcgm.get(dcgm_name), profile=profile, node=node,
                            pool=pool, pod=pod, allocated=seconds,
                            busy=round(seconds * util / 100), util=util,
                        ))  # fmt: skip
                        busy += seconds
                    if busy < 3600:
                        rows.append(_row(
                            hour=hour, cluster=cluster, uuid_=uuid_, dcgm_name=dcgm_name,
                            model=by_dcgm.get(dcgm_name), profile=profile, node=node,
                            pool=pool, pod=None, allocated=0, busy=0, util=0.0,
                            idle=3600 - min(3600, busy),
                        ))  # fmt: skip
                    hour += timedelta(hours=1)
    _insert_many(rows)
    day = start.date()
    while day <= end.date():
        usage_day_refresh(cluster_id=cluster.pk, day=day)
        day += timedelta(days=1)
    return len(rows)


def _node_uuids(node: str) -> list[str]:
    pool = node.rsplit("-node-", 1)[0]
    return [gpu_uuid(node, i) for i in range(NODES[pool][1])]


def _util(pod: JobPod, hour: datetime) -> float:
    """The pod's GPU utilisation in an hour: its team's level, its job's own offset (some jobs
    barely use their GPUs), and the hour's wobble."""
    job = pod.job
    base = UTILISATION.get(job.team.slug, 70) + 24 * (_unit(f"{job.pk}/job") - 0.5)
    if _unit(f"{job.pk}/idle") < 0.04:
        base = 2 + 6 * _unit(f"{job.pk}/low")
    return round(max(0.5, min(99.0, base + 8 * (_unit(f"{pod.pk}/{hour:%j%H}") - 0.5))), 1)


def _row(*, hour, cluster, uuid_, dcgm_name, model, profile, node, pool, pod, allocated, busy,
         util, idle=0) -> dict:  # fmt: skip
    """A UsageHour row's columns that differ from the model's defaults."""
    job = pod.job if pod is not None else None
    return {
        "hour": hour, "cluster_id": cluster.pk, "gpu_uuid": uuid_, "model_name": dcgm_name,
        "gpu_model_id": model.pk if model else None, "mig_profile": profile, "node": node,
        "pool_id": pool.pk, "namespace": job.team.namespace if job else "",
        "pod": pod.name if pod else "", "team_id": job.team_id if job else None,
        "job_id": job.pk if job else None, "seconds_allocated": allocated,
        "seconds_idle": idle, "seconds_busy": busy, "util_mean": util, "sample_count": 120,
        "expected_samples": 120, "exact_times": pod is not None,
        "source": UsageHour.Source.SCRAPE,
        "energy_joules": _energy(dcgm_name, pod, hour, allocated, idle, util),
    }  # fmt: skip


def _energy(dcgm_name, pod, hour, allocated, idle, util) -> float | None:
    """Joules a row's GPU drew: idle power, plus the load's share of the rest while held; a
    few held hours have no reading (None: not measured)."""
    idle_w, full_w = POWER.get(dcgm_name, (40, 300))
    if pod is not None and _unit(f"{pod.pk}/{hour:%j%H}/energy") < UNMEASURED_SHARE:
        return None
    watts = idle_w + (full_w - idle_w) * util / 100.0
    return round(watts * allocated + idle_w * idle, 1)


def _insert_many(rows: list[dict]) -> None:
    """INSERT the rows (COPY on PostgreSQL, else one prepared statement), the other columns at
    their defaults (model instances and bulk_create take minutes for the history's hundred
    thousand rows)."""
    if not rows:
        return
    fields = [f for f in UsageHour._meta.concrete_fields if not f.primary_key]
    now = timezone.now()
    defaults = {f.attname: (now if f.attname == "updated_at" else f.get_default())
                for f in fields}  # fmt: skip
    prep = {f.attname: f for f in fields if f.get_internal_type() == "DateTimeField"}
    table = connection.ops.quote_name(UsageHour._meta.db_table)
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    sql = f"INSERT INTO {table} ({columns}) VALUES ({', '.join(['%s'] * len(fields))})"
    names = [f.attname for f in fields]
    stamp = {name: f.get_db_prep_save(defaults[name], connection) for name, f in prep.items()}
    # JSON columns at their defaults too go in as the database takes JSON, not as dicts.
    stamp |= {f.attname: f.get_db_prep_save(defaults[f.attname], connection) for f in fields
              if f.get_internal_type() == "JSONField" and f.attname not in rows[0]}  # fmt: skip
    values = []
    for row in rows:
        merged = {**defaults, **stamp, **row}
        merged["hour"] = prep["hour"].get_db_prep_save(row["hour"], connection)
        values.append([merged[name] for name in names])
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":  # COPY: several times faster than INSERTs
            with cursor.cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
                for row in values:
                    copy.write_row(row)
            return
        for i in range(0, len(values), 5000):
            cursor.executemany(sql, values[i : i + 5000])
