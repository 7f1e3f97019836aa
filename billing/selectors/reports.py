"""Report building: monthly reports per team and finance-wide, the usage summary, who sees which.

Over 400 lines: one report's parts (lines, top jobs, queue waits, finance sections) read together.

The export formats live apart, in billing.exports.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from datetime import date, datetime
from decimal import Decimal

from django.db import connection
from django.db.models import Aggregate, DurationField, ExpressionWrapper, F, FloatField, Q, QuerySet

from billing.dcgm import HOUR, hour_start
from billing.energy import EnergySums, add_figures, energy_figures
from billing.lines import ReportLine
from billing.models import Budget, EnergySettings, MonthlyReport
from billing.periods import month_bounds
from billing.pricing import billable_seconds, cents, cost_of, gpu_hours, percentile
from billing.selectors.energy import energy_sums
from billing.selectors.gpufaults import gpu_fault_credits_month
from billing.selectors.ledger import ledger_month
from billing.selectors.preemption import preemption_losses
from billing.selectors.prices import price_book_for
from billing.selectors.reservations import reservations_month
from billing.selectors.spot import spot_figures
from billing.selectors.usage import (
    SUM_FIELDS,
    group_cost,
    policies_by_team,
    usage_aggregate,
    usage_aggregate_rows,
)
from core.roles import sees_everything
from fleet.models import Cluster, GpuModel, NodePool
from fleet.selectors.prices import price_book_version
from queues.models import Job, Team
from queues.selectors.tenancy import team_list

# ---------------------------------------------------------------------------------------------
# Who sees which figures


def billing_team_list(*, user) -> QuerySet[Team]:
    """Teams whose figures the user may see (finance and admins: all; managers: department's)."""
    return team_list(user=user)


def billing_sees_all(*, user) -> bool:
    """Finance and admins see finance-wide reports, idle capacity and unattributed cost."""
    return sees_everything(user)


def billing_team_ids(*, user) -> list[int] | None:
    """Ids of the teams whose figures the user sees; None for everything (finance, admins)."""
    if billing_sees_all(user=user):
        return None
    return list(billing_team_list(user=user).values_list("pk", flat=True))


UNKNOWN = "(unknown model)"


def _s(value: Decimal) -> str:
    return str(cents(value))


def _h(seconds) -> str:
    return str(gpu_hours(seconds))


class _Acc:
    """Running sums for one report line."""

    __slots__ = ("allocated", "used", "idle", "util_weighted", "cost", "gap", "stuck", "unknown")

    def __init__(self):
        self.allocated = self.used = self.idle = 0
        self.util_weighted = 0.0
        self.cost = Decimal(0)
        self.gap = self.stuck = self.unknown = 0

    def add(self, group: dict, cost: Decimal):
        self.allocated += group["allocated"]
        self.used += group["used"]
        self.idle += group["idle"]
        self.util_weighted += float(group["util_weighted"] or 0)
        self.cost += cost
        self.gap += group["gap_rows"]
        self.stuck += group["stuck_rows"]
        self.unknown += group["unknown_rows"]

    def as_dict(self) -> dict:
        return {
            "gpu_hours_allocated": _h(self.allocated),
            "gpu_hours_used": _h(self.used),
            "gpu_hours_idle": _h(max(0, self.allocated - self.used)),
            "util_mean": round(self.util_weighted / self.allocated, 1) if self.allocated else 0.0,
            "cost": _s(self.cost),
            "flags": {"gap": self.gap, "stuck_zero": self.stuck, "unknown_model": self.unknown},
        }


class _Percentile(Aggregate):
    """PostgreSQL's PERCENTILE_CONT over a job's queue wait in seconds."""

    function = "PERCENTILE_CONT"
    template = (
        "%(function)s(%(fraction)s) WITHIN GROUP (ORDER BY EXTRACT(EPOCH FROM (%(expressions)s)))"
    )
    output_field = FloatField()

    def __init__(self, expression, fraction, **extra):
        super().__init__(expression, fraction=float(fraction), **extra)


def _queue_waits(*, start: datetime, end: datetime, team_ids=None) -> dict[int, tuple]:
    """Median and p90 queue wait (queued → admitted, seconds) per team, jobs admitted in range."""
    qs = Job.objects.filter(admitted_at__gte=start, admitted_at__lt=end, queued_at__isnull=False)
    if team_ids is not None:
        qs = qs.filter(team_id__in=team_ids)
    if connection.vendor == "postgresql":
        # Linear interpolation, like billing.pricing.percentile, without fetching every job.
        wait = ExpressionWrapper(F("admitted_at") - F("queued_at"), output_field=DurationField())
        return {
            row["team_id"]: (max(0.0, row["p50"]), max(0.0, row["p90"]))
            for row in qs.values("team_id")
            .annotate(p50=_Percentile(wait, 0.5), p90=_Percentile(wait, 0.9))
            .order_by()
        }
    waits: dict[int, list[float]] = defaultdict(list)
    for team_id, queued, admitted in qs.values_list("team_id", "queued_at", "admitted_at"):
        waits[team_id].append(max(0.0, (admitted - queued).total_seconds()))
    return {
        team_id: (percentile(values, 0.5), percentile(values, 0.9))
        for team_id, values in waits.items()
    }


def _top_jobs(*, start, end, team_ids, book, policies) -> tuple[dict, dict]:
    """The five costliest jobs per team as (cost, job id, allocated seconds), and job counts."""
    per_job: dict[tuple[int, int], list] = {}
    rows = usage_aggregate_rows(
        start=start, end=end, group_by=["team_id", "job_id"], team_ids=team_ids, book=book
    )
    allocated_i, used_i = SUM_FIELDS.index("allocated"), SUM_FIELDS.index("used")
    for (team_id, job_id, price_id), sums in rows:
        if job_id is None or team_id is None:
            continue
        price = book.by_id.get(price_id) if price_id is not None else None
        cost = Decimal(0)
        if price is not None:
            basis, weight = policies.get(team_id, ("allocated", Decimal("0.5")))
            seconds = billable_seconds(allocated=sums[allocated_i], used=sums[used_i],
                                       basis=basis, blend_weight=weight)  # fmt: skip
            cost = cost_of(seconds, price.price_per_hour)
        entry = per_job.get((team_id, job_id))
        if entry is None:
            per_job[(team_id, job_id)] = [cost, sums[allocated_i]]
        else:
            entry[0] += cost
            entry[1] += sums[allocated_i]
    by_team: dict[int, list] = defaultdict(list)
    for (team_id, job_id), (cost, allocated) in per_job.items():
        by_team[team_id].append((cost, -job_id, allocated))
    top = {}
    counts = {}
    for team_id, items in by_team.items():
        counts[team_id] = len(items)
        top[team_id] = [
            (cost, -neg_id, allocated) for cost, neg_id, allocated in heapq.nlargest(5, items)
        ]
    return top, counts


def _budget_status(budget: Budget | None, cost: Decimal, allocated_seconds: int) -> dict | None:
    if budget is None:
        return None
    spent = cost if budget.kind == Budget.Kind.CURRENCY else Decimal(allocated_seconds) / 3600
    percent = (spent / budget.amount * 100) if budget.amount else Decimal(0)
    return {
        "kind": budget.kind,
        "amount": str(budget.amount),
        "unit": budget.unit,
        "spent": _s(spent),
        "percent": float(round(percent, 1)),
        "enforce": budget.enforce,
        "held": budget.held,
        "alerts_sent": budget.alerts_sent,
    }


def build_report(*, month: date, team_ids: list[int] | None = None) -> dict:
    """The month's report for the given teams (all teams and finance sections when None)."""
    start, end = month_bounds(month)
    book = price_book_for(start=start, end=end)
    # Two aggregates over the month: lines (team × model × pool) and jobs (team × job).
    groups = usage_aggregate(
        start=start,
        end=end,
        group_by=["team_id", "gpu_model_id", "mig_profile", "pool_id", "model_name", "cluster_id"],
        team_ids=team_ids,
        book=book,
    )
    policies = policies_by_team(team_ids)
    models = dict(GpuModel.objects.values_list("id", "name"))
    lines: dict[int, dict[str, _Acc]] = defaultdict(lambda: defaultdict(_Acc))
    unattributed: dict[str, _Acc] = defaultdict(_Acc)
    by_cluster: dict[int, _Acc] = defaultdict(_Acc)
    idle_groups = []
    for g in groups:
        if g["idle"]:
            idle_groups.append(g)
        if not g["allocated"] and not g["used"]:
            continue
        label = models.get(g["gpu_model_id"], UNKNOWN)
        if g["mig_profile"]:
            label = f"{label} {g['mig_profile']}"
        held = {**g, "idle": 0} if g["idle"] else g
        if g["team_id"] is None:
            g["cost"] = group_cost(g, book, None)
            unattributed[label].add(held, g["cost"])
            by_cluster[g["cluster_id"]].add(held, g["cost"])
            continue
        cost = g["cost"] = group_cost(g, book, policies.get(g["team_id"]))
        lines[g["team_id"]][label].add(held, cost)
        by_cluster[g["cluster_id"]].add(held, cost)
    top_by_team, job_counts = _top_jobs(start=start, end=end, team_ids=team_ids, book=book,
                                        policies=policies)  # fmt: skip
    energy, pue = _energy_by_line(start=start, end=end, team_ids=team_ids, models=models)
    top_ids = {job_id for items in top_by_team.values() for _, job_id, _ in items}
    job_names = dict(Job.objects.filter(pk__in=top_ids).values_list("id", "name"))
    waits = _queue_waits(start=start, end=end, team_ids=team_ids)
    spot = spot_figures(start=start, end=end, team_ids=team_ids, book=book, policies=policies)
    lost = preemption_losses(start=start, end=end, team_ids=team_ids)
    budgets = {
        b.team_id: b
        for b in Budget.objects.filter(month=month).filter(
            Q(team_id__in=team_ids) if team_ids is not None else Q()
        )
    }
    ledger = ledger_month(month=month, team_ids=team_ids)
    fault_credits = gpu_fault_credits_month(month=month, team_ids=team_ids)
    reserved = reservations_month(month=month, team_ids=team_ids, book=book, policies=policies)
    visible = (
        set(lines)
        | set(budgets)
        | set(job_counts)
        | set(ledger)
        | set(lost)
        | set(fault_credits)
        | set(reserved)
    )
    if team_ids is not None:
        visible |= set(team_ids)
    teams = Team.objects.select_related("department").filter(pk__in=visible).order_by("name")
    team_rows = []
    grand = _Acc()
    grand_energy = EnergySums()
    for team in teams:
        total = _Acc()
        team_lines = []
        team_energy = EnergySums()
        for sums in energy.get(team.pk, {}).values():
            team_energy.add(sums)
        grand_energy.add(team_energy)
        for label, acc in sorted(lines.get(team.pk, {}).items()):
            # Lines are rounded to cents first, so every total is the sum of what it shows.
            acc.cost = cents(acc.cost)
            team_lines.append(ReportLine(gpu_model=label, **acc.as_dict()).as_dict())
            if label in energy.get(team.pk, {}):
                team_lines[-1]["energy"] = energy_figures(energy[team.pk][label], pue=pue)
            for name in _Acc.__slots__:
                setattr(total, name, getattr(total, name) + getattr(acc, name))
        for name in _Acc.__slots__:
            setattr(grand, name, getattr(grand, name) + getattr(total, name))
        team_waits = waits.get(team.pk, (None, None))
        basis = policies.get(team.pk, ("allocated", Decimal("0.5")))
        team_rows.append(
            {
                "team": team.slug,
                "team_name": team.name,
                "department": team.department.slug,
                "cost_centre": team.cost_centre,
                "basis": basis[0],
                "blend_weight": str(basis[1]) if basis[0] == "blend" else None,
                "lines": team_lines,
                **total.as_dict(),
                # GPU energy (measured) and facility energy and CO2e (estimates).
                "energy": energy_figures(team_energy, pue=pue),
                "job_count": job_counts.get(team.pk, 0),
                "top_jobs": [
                    {
                        "job_id": job_id,
                        "name": job_names.get(job_id, f"job {job_id}"),
                        "gpu_hours_allocated": _h(allocated),
                        "cost": _s(cost),
                    }
                    for cost, job_id, allocated in top_by_team.get(team.pk, [])
                ],
                "queue_wait_median_seconds": _round(team_waits[0]),
                "queue_wait_p90_seconds": _round(team_waits[1]),
                "budget": _budget_status(budgets.get(team.pk), total.cost, total.allocated),
                # Spot usage against on-demand prices, and work lost to interruptions.
                "spot": spot.get(team.pk),
                # Work preempted jobs lost (since their last checkpoint), not billed apart.
                "preemption": lost.get(team.pk),
                # Borrowing from the cohort and lending to it, at finance's rate: separate lines.
                "ledger": ledger.get(team.pk),
                # GPU-hours lost to GPU faults, credited (billing.services.gpufaults).
                "gpu_fault_credits": fault_credits.get(team.pk),
                # Advance reservations: the GPUs held for the team, by its policy (own lines).
                "reservations": reserved.get(team.pk),
                "amount_due": _s(
                    total.cost
                    + Decimal((ledger.get(team.pk) or {}).get("net", "0"))
                    - Decimal((fault_credits.get(team.pk) or {}).get("credit", "0"))
                    + Decimal((reserved.get(team.pk) or {}).get("charge", "0"))
                ),
            }
        )
    team_cost = grand.cost
    if team_ids is None:
        for sums in energy.get(None, {}).values():
            grand_energy.add(sums)
        for acc in unattributed.values():
            acc.cost = cents(acc.cost)
            for name in _Acc.__slots__:
                setattr(grand, name, getattr(grand, name) + getattr(acc, name))
    report = {
        "month": f"{month:%Y-%m}",
        "period_start": start.isoformat(),
        "period_end": end.isoformat(),
        "currency": _currency(book),
        "price_book_version": price_book_version(),
        "teams": team_rows,
        "totals": {**grand.as_dict(), "energy": energy_figures(grand_energy, pue=pue)},
    }
    if team_ids is None:
        report.update(
            _finance_sections(
                groups=groups,
                idle_groups=idle_groups,
                book=book,
                unattributed=unattributed,
                models=models,
            )
        )
        report["totals"]["team_cost"] = _s(team_cost)
        report["totals"]["ledger_charges"] = str(
            sum((Decimal(r["charge"]) for r in ledger.values()), Decimal(0))
        )
        report["totals"]["ledger_credits"] = str(
            sum((Decimal(r["credit"]) for r in ledger.values()), Decimal(0))
        )
        report["totals"]["gpu_fault_credits"] = str(
            sum((Decimal(r["credit"]) for r in fault_credits.values()), Decimal(0))
        )
        report["totals"]["reservation_charges"] = str(
            sum((Decimal(r["charge"]) for r in reserved.values()), Decimal(0))
        )
        report["clusters"] = _cluster_rows(by_cluster, grand.cost)
        for line in report["unattributed"]:
            if line["gpu_model"] in energy.get(None, {}):
                line["energy"] = energy_figures(energy[None][line["gpu_model"]], pue=pue)
    return report


def _energy_by_line(*, start, end, team_ids, models) -> tuple[dict, Decimal]:
    """Energy sums per team (None: unattributed) and report line label, and the site's PUE."""
    site = EnergySettings.current()
    out: dict = defaultdict(lambda: defaultdict(EnergySums))
    for (team_id, model_id, mig), sums in energy_sums(
        group_by=["team_id", "gpu_model_id", "mig_profile"], start=start, end=end,
        team_ids=team_ids, settings=site,
    ).items():  # fmt: skip
        label = models.get(model_id, UNKNOWN)
        if mig:
            label = f"{label} {mig}"
        out[team_id][label].add(sums)
    return out, site.pue


def _cluster_rows(by_cluster: dict, total: Decimal) -> list[dict]:
    """The month per cluster. Each cluster's cost is rounded to cents and the rounding left
    over goes to the largest, so the clusters add up to the report's total to the cent."""
    names = dict(Cluster.objects.filter(pk__in=list(by_cluster)).values_list("id", "name"))
    exact = {cid: acc.cost for cid, acc in by_cluster.items()}
    for acc in by_cluster.values():
        acc.cost = cents(acc.cost)
    if by_cluster:
        largest = max(exact, key=lambda cid: exact[cid])
        by_cluster[largest].cost += total - sum(acc.cost for acc in by_cluster.values())
    return [
        {"cluster": names.get(cid, "unknown"), **acc.as_dict()}
        for cid, acc in sorted(by_cluster.items(), key=lambda item: names.get(item[0], ""))
    ]


def _round(value):
    return None if value is None else round(value, 1)


def _currency(book) -> str:
    currencies = {p.currency for p in book}
    return currencies.pop() if len(currencies) == 1 else ("EUR" if not currencies else "mixed")


def _finance_sections(*, groups, idle_groups, book, unattributed, models: dict) -> dict:
    """models: GPU model id -> name, as build_report read them (not read a second time)."""
    idle = idle_groups
    pools = {p.pk: p for p in NodePool.objects.select_related("cluster", "gpu_model")}
    by_pool: dict[tuple, dict] = {}
    idle_seconds = 0
    for g in idle:
        # Idle capacity is priced as if allocated: what the empty GPUs cost the organisation.
        cost = group_cost({**g, "allocated": g["idle"], "used": 0}, book, None)
        pool = pools.get(g["pool_id"])
        key = (g["pool_id"], g["gpu_model_id"], g["mig_profile"])
        entry = by_pool.setdefault(
            key,
            {
                "pool": pool.name if pool else "(no pool)",
                "cluster": pool.cluster.name if pool else "",
                "gpu_model": models.get(g["gpu_model_id"], UNKNOWN),
                "seconds": 0,
                "cost": Decimal(0),
                "gap": 0,
            },
        )
        entry["seconds"] += g["idle"]
        entry["cost"] += cost
        entry["gap"] += g["gap_rows"]
        idle_seconds += g["idle"]
    # Rounded once, per row shown; the pools' and the total's figures are sums of those rows.
    for entry in by_pool.values():
        entry["cost"] = cents(entry["cost"])
    idle_total = sum((e["cost"] for e in by_pool.values()), Decimal(0))
    # Cost of held GPU time per pool (each team's basis), beside the pool's idle capacity.
    held_by_pool: dict[int | None, _Acc] = defaultdict(_Acc)
    for g in groups:
        if "cost" in g:  # held time, priced in build_report
            held_by_pool[g["pool_id"]].add({**g, "idle": 0}, g["cost"])
    pool_lines = []
    for pool_id in sorted(set(held_by_pool) | {g["pool_id"] for g in idle}, key=lambda k: k or 0):
        pool = pools.get(pool_id)
        acc = held_by_pool.get(pool_id, _Acc())
        idle_seconds_pool = sum(g["idle"] for g in idle if g["pool_id"] == pool_id)
        idle_cost_pool = sum((e["cost"] for k, e in by_pool.items() if k[0] == pool_id), Decimal(0))
        pool_lines.append(
            {
                "pool": pool.name if pool else "(no pool)",
                "cluster": pool.cluster.name if pool else "",
                "gpu_hours_allocated": _h(acc.allocated),
                "gpu_hours_used": _h(acc.used),
                "cost": _s(acc.cost),
                "gpu_hours_idle_capacity": _h(idle_seconds_pool),
                "idle_cost": _s(idle_cost_pool),
            }
        )
    unknown_rows: dict[str, int] = defaultdict(int)
    for g in groups:
        if g["unknown_seconds"]:
            unknown_rows[g["model_name"] or "(no modelName)"] += g["unknown_seconds"]
    un_total = sum((a.cost for a in unattributed.values()), Decimal(0))
    return {
        "pools": pool_lines,
        "idle_capacity": [
            {
                "pool": e["pool"],
                "cluster": e["cluster"],
                "gpu_model": e["gpu_model"],
                "gpu_hours_idle": _h(e["seconds"]),
                "cost": _s(e["cost"]),
                "gap_rows": e["gap"],
            }
            for e in sorted(by_pool.values(), key=lambda e: (e["cluster"], e["pool"]))
        ],
        "unattributed": [
            ReportLine(gpu_model=label, **acc.as_dict()).as_dict()
            for label, acc in sorted(unattributed.items())
        ],
        "unknown_models": [
            {"model_name": name, "gpu_hours": _h(sec)} for name, sec in sorted(unknown_rows.items())
        ],
        "finance_totals": {
            "idle_gpu_hours": _h(idle_seconds),
            "idle_cost": _s(idle_total),
            "unattributed_cost": _s(un_total),
        },
    }


def _closed(month: date) -> MonthlyReport | None:
    """The month's frozen report, when it is closed and has a snapshot."""
    closed = MonthlyReport.objects.filter(month=month, state=MonthlyReport.State.CLOSED).first()
    return closed if closed is not None and closed.snapshot else None


def finance_report(*, month: date) -> dict:
    """The finance-wide report of a month: the frozen snapshot when closed, else live."""
    closed = _closed(month)
    if closed is not None:
        return {**closed.snapshot, "closed": True, "closed_at": closed.closed_at.isoformat()}
    return {**build_report(month=month), "closed": False}


def team_report(*, team: Team, month: date) -> dict:
    """One team's report for a month (from the frozen snapshot when the month is closed)."""
    return scoped_report(month=month, teams=[team], everything=False)


def scoped_report(*, month: date, teams: list[Team], everything: bool) -> dict:
    """The report a user may see: finance-wide, or restricted to their teams."""
    if everything:
        return finance_report(month=month)
    closed = _closed(month)
    slugs = {t.slug for t in teams}
    if closed is not None:
        rows = [t for t in closed.snapshot.get("teams", []) if t["team"] in slugs]
        head = {k: v for k, v in closed.snapshot.items() if k in _HEAD}
        return {**head, "teams": rows, "totals": _totals_of(rows), "closed": True}
    return {**build_report(month=month, team_ids=[t.pk for t in teams]), "closed": False}


def user_report(*, user, month: date) -> dict:
    """The month's report as this user may see it: finance-wide, or their teams only."""
    return scoped_report(
        month=month,
        teams=list(billing_team_list(user=user)),
        everything=billing_sees_all(user=user),
    )


_HEAD = ("month", "period_start", "period_end", "currency", "price_book_version")


def _totals_of(rows: list[dict]) -> dict:
    def total(key):
        return sum((Decimal(r[key]) for r in rows), Decimal(0))

    return {
        "gpu_hours_allocated": str(total("gpu_hours_allocated")),
        "gpu_hours_used": str(total("gpu_hours_used")),
        "gpu_hours_idle": str(total("gpu_hours_idle")),
        "cost": str(total("cost")),
        "energy": add_figures([r.get("energy") for r in rows]),
    }


# ---------------------------------------------------------------------------------------------
# The usage API's summary


def usage_summary(*, team: Team, start: datetime, end: datetime) -> dict:
    """GPU-hours allocated, used, idle and cost per GPU model over the hours meeting [start, end).

    Usage is kept per hour, so what is summed is whole hours: from the hour `start` falls in to
    the end of the hour before `end` (or of `end`'s own, when `end` is not on the hour). The
    answer's start and end are that window; requested_start and requested_end echo the question.
    Reads UsageHour rows, including the hour in progress that the direct scrape keeps current.
    """
    first = hour_start(start)
    last = hour_start(end)
    if last < end:
        last += HOUR
    book = price_book_for(start=first, end=end)
    groups = usage_aggregate(
        start=first,
        end=end,
        group_by=["gpu_model_id", "mig_profile"],
        team_ids=[team.pk],
        book=book,
    )
    policy = policies_by_team([team.pk]).get(team.pk)
    models = dict(GpuModel.objects.values_list("id", "name"))
    per_model: dict[str, _Acc] = defaultdict(_Acc)
    total = _Acc()
    for g in groups:
        label = models.get(g["gpu_model_id"], UNKNOWN)
        if g["mig_profile"]:
            label = f"{label} {g['mig_profile']}"
        cost = group_cost(g, book, policy)
        per_model[label].add(g, cost)
        total.add(g, cost)
    return {
        "team": team.slug,
        "start": first.isoformat(),
        "end": last.isoformat(),
        "requested_start": start.isoformat(),
        "requested_end": end.isoformat(),
        "currency": _currency(book),
        "basis": (policy or ("allocated",))[0],
        "models": [{"gpu_model": k, **v.as_dict()} for k, v in sorted(per_model.items())],
        "totals": total.as_dict(),
        "spot": spot_figures(
            start=first,
            end=end,
            team_ids=[team.pk],
            book=book,
            policies={team.pk: policy} if policy else {},
        ).get(team.pk),
    }
