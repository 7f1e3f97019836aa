"""Demo billing data: prices for the demo GPU models, budgets, and last month's usage. Idempotent.

Last month's usage is synthetic hourly rows for GPUs on the nodes of kubesim/fleets/demo.yaml
(same node names; GPU UUIDs of the demo's own making), so last month's report has figures on a
fresh install.
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.utils import timezone

from billing.dcgm import hour_start
from billing.models import Budget, TeamBillingPolicy, UsageHour
from billing.periods import month_bounds, month_start
from billing.selectors.usage import default_cluster
from billing.services.rollups import usage_day_refresh
from fleet.models import GpuModel, GpuPrice, NodePool
from queues.manifests.jobs import job_k8s_name
from queues.models import Job, JobPod, JobTransition, Membership, PriorityTier, Team

# GPU model: [(price per GPU-hour, in force from)], EUR. A100 got cheaper last month.
PRICES = {
    "A100-SXM4-80GB": [("3.2000", datetime(2025, 1, 1, tzinfo=UTC)), ("2.9000", None)],
    "H100-80GB-HBM3": [("4.5000", datetime(2025, 1, 1, tzinfo=UTC))],
    "L4": [("0.8000", datetime(2025, 1, 1, tzinfo=UTC))],
}
# pool: (DCGM modelName, nodes, GPUs per node) as in kubesim/fleets/demo.yaml
FLEET = {
    "a100": ("NVIDIA A100-SXM4-80GB", 4, 8),
    "h100": ("NVIDIA H100 80GB HBM3", 2, 8),
    "l4": ("NVIDIA L4", 4, 4),
}
BUDGETS = {"vision": "6000", "nlp": "4000", "speech": "1500", "recsys": "2500", "robotics": "800"}


def _unit(seed: str) -> float:
    return int.from_bytes(hashlib.sha256(seed.encode()).digest()[:4], "big") / 2**32


def _gpu_uuid(node: str, index: int) -> str:
    """A made-up UUID for a GPU of the demo's history (the live GPUs' come from DCGM)."""
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_OID, f"quartermaster-demo/{node}/{index}"))


@transaction.atomic
def seed_billing() -> dict:
    """Prices, this month's budgets and last month's usage history for the demo teams."""
    now = timezone.now()
    this_month = month_start(now)
    last_month = month_start(this_month - timedelta(days=1))
    last_start, last_end = month_bounds(last_month)
    prices = _seed_prices(change_at=last_start + timedelta(days=14))
    teams = {t.slug: t for t in Team.objects.filter(slug__in=BUDGETS)}
    finance = get_user_model().objects.filter(groups__name="finance").first()
    for slug, amount in BUDGETS.items():
        if slug in teams:
            Budget.objects.get_or_create(
                team=teams[slug],
                month=this_month,
                defaults={
                    "amount": Decimal(amount),
                    "thresholds": [50, 80, 100],
                    "enforce": slug == "robotics",
                    "created_by": finance,
                },
            )
    if "recsys" in teams:
        TeamBillingPolicy.objects.get_or_create(
            team=teams["recsys"], defaults={"basis": "blend", "blend_weight": Decimal("0.700")}
        )
    rows = _seed_history(start=last_start, end=last_end, teams=teams)
    # This month up to the hour in progress, which the live scrape of kubesim takes over.
    rows += _seed_history(start=month_bounds(this_month)[0], end=hour_start(now), teams=teams)
    return {"prices": prices, "budgets": len(teams), "usage_rows": rows}


def _seed_prices(*, change_at: datetime) -> int:
    created = 0
    for model_name, steps in PRICES.items():
        model = GpuModel.objects.filter(name=model_name).first()
        if model is None or model.prices.exists():
            continue
        for i, (price, start) in enumerate(steps):
            start = start or change_at
            end = steps[i + 1][1] or change_at if i + 1 < len(steps) else None
            GpuPrice.objects.create(
                gpu_model=model,
                price_per_hour=Decimal(price),
                effective_from=start,
                effective_to=end,
                note="demo price book",
            )
            created += 1
    return created


def _seed_history(*, start: datetime, end: datetime, teams: dict) -> int:
    cluster = default_cluster()
    if cluster is None or not teams:
        return 0
    if (
        end <= start
        or Job.objects.filter(
            name__startswith="history-", started_at__gte=start, started_at__lt=end
        ).exists()
    ):
        return 0
    pools = {p.name: p for p in NodePool.objects.filter(cluster=cluster)}
    models = {m.name: m for m in GpuModel.objects.all()}
    by_dcgm = {n: m for m in models.values() for n in (m.dcgm_model_names or [])}
    # Each team's jobs belong to its own members, in turn.
    members: dict[int, list] = {}
    for membership in Membership.objects.filter(team__in=teams.values()).select_related("user"):
        members.setdefault(membership.team_id, []).append(membership.user)
    tier = PriorityTier.objects.order_by("-is_default", "value").first()
    if not members or tier is None:
        return 0
    slugs = sorted(teams)
    hours = int((end - start).total_seconds() // 3600)
    # First the segments (GPU, hours, team or idle), then jobs and pods in bulk, then the rows.
    segments = []
    for pool_name, (dcgm_name, nodes, per_node) in FLEET.items():
        for n in range(nodes):
            node = f"{pool_name}-node-{n}"
            for g in range(per_node):
                uuid_ = _gpu_uuid(node, g)
                # Each GPU runs a job of one team for stretches of 6-30 hours, idle between.
                h = 0
                while h < hours:
                    length = 6 + int(_unit(f"{uuid_}/{h}/len") * 24)
                    busy = _unit(f"{uuid_}/{h}/busy") < 0.7
                    team = teams[slugs[int(_unit(f"{uuid_}/{h}/team") * len(slugs))]]
                    util = 35 + 60 * _unit(f"{uuid_}/{h}/util")
                    job = None
                    people = members.get(team.pk)
                    if busy and people:
                        owner = people[int(_unit(f"{uuid_}/{h}/owner") * len(people))]
                        job = _demo_job(
                            team, owner, tier, pools.get(pool_name), cluster,
                            start + timedelta(hours=h), min(length, hours - h), uuid_,
                        )  # fmt: skip
                    segments.append((pool_name, dcgm_name, node, uuid_, h, min(h + length, hours),
                                     team if job else None, job, util))  # fmt: skip
                    h += length
    jobs = [seg[7] for seg in segments if seg[7] is not None]
    Job.objects.bulk_create(jobs, batch_size=1000)
    # The times they were really submitted (created_at is stamped "now" on insert), their
    # names in the cluster, and a timeline with every state at its time.
    for job in jobs:
        job.created_at = job.submitted_at
        job.k8s_name = job_k8s_name(name=job.name, job_id=job.pk)
    Job.objects.bulk_update(jobs, ["created_at", "k8s_name"], batch_size=1000)
    JobTransition.objects.bulk_create(
        [
            JobTransition(job=job, from_state=before, to_state=state, at=at, reason=reason)
            for job in jobs
            for before, state, at, reason in (
                ("draft", "submitted", job.submitted_at, "Submitted."),
                ("submitted", "queued", job.queued_at, "Created in the cluster."),
                (
                    "queued",
                    "admitted",
                    job.admitted_at,
                    f"Admitted in pool {job.pool.name if job.pool else '?'}.",
                ),
                ("admitted", "running", job.started_at, "Pods are running."),
                ("running", "succeeded", job.finished_at, "All workers finished successfully."),
            )
        ],
        batch_size=2000,
    )
    JobPod.objects.bulk_create(
        [
            JobPod(
                job=job,
                name=f"{job.name}-0",
                namespace=job.team.namespace,
                node_name=seg[2],
                gpus=1,
                gpu_uuids=[seg[3]],
                phase="Succeeded",
                started_at=job.started_at,
                finished_at=job.finished_at,
            )  # fmt: skip
            for seg in segments
            if (job := seg[7]) is not None
        ],
        batch_size=1000,
    )
    rows = []
    for pool_name, dcgm_name, node, uuid_, h0, h1, team, job, util in segments:
        busy = job is not None
        for k in range(h0, h1):
            rows.append(
                UsageHour(
                    hour=start + timedelta(hours=k),
                    cluster=cluster,
                    gpu_uuid=uuid_,
                    model_name=dcgm_name,
                    gpu_model=by_dcgm.get(dcgm_name),
                    node=node,
                    pool=pools.get(pool_name),
                    namespace=team.namespace if busy else "",
                    pod=f"{job.name}-0" if busy else "",
                    team=team,
                    job=job,
                    seconds_allocated=3600 if busy else 0,
                    seconds_idle=0 if busy else 3600,
                    seconds_busy=round(3600 * util / 100) if busy else 0,
                    util_mean=round(util, 1) if busy else 0.0,
                    sample_count=120,
                    expected_samples=120,
                    source=UsageHour.Source.SCRAPE,
                )  # fmt: skip
            )
    _insert_many(rows)
    day = start.date()
    while day < end.date():
        usage_day_refresh(cluster_id=cluster.pk, day=day)
        day += timedelta(days=1)
    return len(rows)


def _demo_job(team, owner, tier, pool, cluster, started, hours, uuid_) -> Job:
    """An unsaved finished job (saved in bulk by the caller), complete as a real one."""
    name = f"history-{team.slug}-{started:%m%d%H}-{uuid_[4:10]}"
    queued = started - timedelta(minutes=5 + int(_unit(name) * 40))
    return Job(
        team=team, owner=owner, name=name, image="ghcr.io/example/train:1", tier=tier,
        command=["torchrun", "train.py"], args=["--epochs", str(2 + hours // 6)],
        max_runtime_seconds=(hours + 2) * 3600, expected_runtime_seconds=hours * 3600,
        pool=pool, admitted_pool=pool, cluster=cluster, state=Job.State.SUCCEEDED,
        submitted_at=queued - timedelta(seconds=2), queued_at=queued,
        admitted_at=started - timedelta(seconds=3), started_at=started,
        finished_at=started + timedelta(hours=hours), desired_generation=1, applied_generation=1,
    )  # fmt: skip


def _insert_many(rows: list[UsageHour]) -> None:
    """INSERT the rows with one prepared statement (SQLite's bulk_create batches of ~28 rows
    make a month of demo history take many seconds)."""
    fields = [f for f in UsageHour._meta.concrete_fields if not f.primary_key]
    table = connection.ops.quote_name(UsageHour._meta.db_table)
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    sql = f"INSERT INTO {table} ({columns}) VALUES ({', '.join(['%s'] * len(fields))})"
    values = [
        [f.get_db_prep_save(f.pre_save(row, True), connection) for f in fields] for row in rows
    ]
    with connection.cursor() as cursor:
        for i in range(0, len(values), 5000):
            cursor.executemany(sql, values[i : i + 5000])
