"""Does the replay of today's configuration give back what happened? Per team, the replayed
median and p90 wait against the recorded ones; where they differ by more than the tolerance,
the reasons found in the record: the configuration changed during the window (quotas, tiers,
weights, sharing), a team's queue was held, spot nodes were taken back, a pool has no nodes
known, jobs never started or carry no pods, the usage a team's members were remembered by was
estimated; and the first job that went otherwise in the replay than in the cluster.

A manager compares the proposal with the replay of today's configuration; the recorded waits
stand beside them only where the two agree, else the page says by how much they differ and why.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime

from core.durations import duration_text
from fleet.models import NodePool
from queues.models import AuditEvent, Job, JobPod, Team

# Waits agree when within this share of the recorded one, or within SLACK_SECONDS of it (a
# minute is nothing on a wait of seconds, whatever the ratio).
TOLERANCE = 0.10
SLACK_SECONDS = 60.0
# A replayed start this far from the recorded one is a job that went otherwise.
START_SLACK_SECONDS = 60.0
# The record's changes that make today's configuration not the one the window ran under.
CHANGES = {
    "quota.change": "quota",
    "quota.burst_expired": "a burst of quota ended",
    "tier.change": "a priority tier",
    "tier.create": "a new priority tier",
    "team.fair_share_weight": "a fair-sharing weight",
    "team.member_fair_sharing": "sharing a queue among members",
    "department.fair_share": "sharing with the organisation",
}
HOLD, RELEASE = "team.queue_hold", "team.queue_release"
MAX_LISTED = 5


def agreement(*, figures: dict, runs, start: datetime, end: datetime, team_names: dict) -> dict:
    """Today's replayed waits against the recorded ones, per team: {"agrees", "tolerance_percent",
    "worst_percent" (None when the recorded wait was none), "worst" (team, quantile, the gap in
    seconds, the replayed and recorded waits), "teams" ({team id: {"p50"|"p90": {replayed,
    recorded, difference_percent, agrees}}}), "jobs_otherwise" (the jobs whose replayed start is
    not the recorded one) and "otherwise_by_team" ({team id: how many}), "reasons" (sentences)};
    the reasons are looked for only where they disagree."""
    teams, worst = {}, None
    for team_id, row in figures["teams"].items():
        if not row.get("jobs"):
            continue
        teams[team_id] = {}
        for q in ("p50", "p90"):
            replayed, recorded = row[f"wait_{q}_seconds"], row[f"actual_wait_{q}_seconds"]
            gap = abs((replayed or 0) - (recorded or 0))
            ok = gap <= max(SLACK_SECONDS, TOLERANCE * (recorded or 0))
            percent = round(100 * gap / recorded, 1) if recorded else None
            teams[team_id][q] = {
                "replayed": replayed,
                "recorded": recorded,
                "difference_percent": percent,
                "agrees": ok,
            }
            # The worst is the largest share of the recorded wait (any gap on none at all).
            rank = gap / recorded if recorded else float("inf")
            if not ok and (worst is None or rank > worst[3]):
                worst = (team_id, q, percent, rank, gap, replayed, recorded)
    otherwise = _went_otherwise(runs, start)
    out = {
        "agrees": worst is None,
        "tolerance_percent": round(100 * TOLERANCE),
        "worst_percent": worst[2] if worst else None,
        "worst": {
            "team": team_names.get(int(worst[0]), worst[0]),
            "quantile": worst[1],
            "gap_seconds": worst[4],
            "replayed": worst[5],
            "recorded": worst[6],
        }
        if worst
        else None,
        "teams": teams,
        "jobs_otherwise": len(otherwise),
        "otherwise_by_team": dict(Counter(str(job.team_id) for job, _, _ in otherwise)),
        "reasons": [],
    }
    if worst is not None:
        out["reasons"] = _reasons(
            runs=runs,
            start=start,
            end=end,
            otherwise=otherwise,
            disagreeing={
                int(t) for t, qs in teams.items() if not all(v["agrees"] for v in qs.values())
            },
        )
    return out


def _went_otherwise(runs, start: datetime) -> list[tuple[Job, float | None, float | None]]:
    """The window's jobs whose replayed start differs from the recorded one, by submission:
    [(job, replayed start, recorded start)] in seconds from the window's start."""
    out = []
    for job, r in runs:
        if job.carried:
            continue
        recorded = (job.started_at - start).total_seconds() if job.started_at else None
        if (recorded is None) != (r.started is None) or (
            recorded is not None and abs(r.started - recorded) > START_SLACK_SECONDS
        ):
            out.append((job, r.started, recorded))
    out.sort(key=lambda x: (x[0].submitted_at, x[0].pk))
    return out


def _when(t: datetime) -> str:
    return f"{t:%-d %b %H:%M} UTC"


def _listed(items: list[str]) -> str:
    more = len(items) - MAX_LISTED
    return "; ".join(items[:MAX_LISTED]) + (f"; and {more} more" if more > 0 else "")


def _reasons(*, runs, start, end, otherwise, disagreeing: set[int]) -> list[str]:
    jobs = [job for job, _ in runs]
    team_ids = {job.team_id for job in jobs} | disagreeing
    events = list(
        AuditEvent.objects.filter(created_at__gte=start, created_at__lt=end)
        .filter(verb__in=[*CHANGES, HOLD, RELEASE])
        .select_related("team")
        .order_by("created_at", "id")
    )
    reasons = []
    changes = [
        f"{CHANGES[e.verb]} ({e.object_repr or e.team or ''}) on {_when(e.created_at)}"
        for e in events
        if e.verb in CHANGES
    ]
    if changes:
        reasons.append(
            "The configuration changed during the window, and the replay runs "
            f"today's all through it: {_listed(changes)}."
        )
    holds = _holds(events, start=start, end=end, team_ids=team_ids)
    if holds:
        reasons.append(
            "Queues were held, so nothing of them started then (the replay asks "
            f"about quota, not holds): {_listed(holds)}."
        )
    interrupted = JobPod.objects.filter(
        job__in=[j.pk for j in jobs], interrupted=True, finished_at__gte=start
    ).count()
    if interrupted:
        reasons.append(
            f"{interrupted} worker{'s were' if interrupted != 1 else ' was'} stopped "
            "when spot nodes were taken back; the replay does not take nodes away."
        )
    empty = sorted(
        {
            (job.admitted_pool or job.pool).name
            for job in jobs
            if (job.admitted_pool or job.pool) is not None
        }
        - set(NodePool.objects.filter(nodes__gpu_capacity__gt=0).values_list("name", flat=True))
    )
    if empty:
        reasons.append(
            f"No nodes are known in pool{'s' if len(empty) > 1 else ''} "
            f"{', '.join(empty)}: the replay has no room there for the jobs that ran "
            "(has the cluster's inventory been synced?)."
        )
    down = list(
        NodePool.objects.filter(nodes__ready=False).values_list("name", flat=True).distinct()
    ) + list(
        NodePool.objects.filter(nodes__unschedulable=True).values_list("name", flat=True).distinct()
    )
    if down:
        reasons.append(
            f"Nodes of {', '.join(sorted(set(down)))} are not ready or are cordoned "
            "now; the replay counts the nodes as they are now, all through the "
            "window."
        )
    unknown = [
        job
        for job in jobs
        if not job.carried and not job.started_at and job.state not in (Job.State.CANCELLED,)
    ]
    if unknown:
        reasons.append(
            f"{len(unknown)} job{'s' if len(unknown) != 1 else ''} never started; "
            "the replay runs them for their expected (else maximum) runtime."
        )
    without = {j.pk for j in jobs if j.started_at} - set(
        JobPod.objects.filter(job__in=[j.pk for j in jobs if j.started_at]).values_list(
            "job_id", flat=True
        )
    )
    if without:
        reasons.append(
            f"{len(without)} job{'s have' if len(without) != 1 else ' has'} no "
            "recorded pods; how long they held their quota is taken as finish − "
            "first start, preemptions included."
        )
    sharing = sorted(
        {
            job.team.name
            for job in jobs
            if job.team_id in disagreeing and job.team.member_fair_sharing
        }
    )
    if sharing:
        reasons.append(
            f"{', '.join(sharing)} share{'s' if len(sharing) == 1 else ''} the queue "
            "among members: the usage Kueue remembered for each member when the "
            "window opened is estimated from the recorded jobs, and a small "
            "difference changes who goes first."
        )
    carried = sum(1 for job in jobs if job.carried)
    if carried and otherwise and otherwise[0][0].submitted_at - start < (end - start) / 10:
        reasons.append(
            f"{carried} job{'s were' if carried != 1 else ' was'} running or waiting "
            "when the window opened; the replay starts them as they were then, "
            "and the first to go otherwise did so early in the window."
        )
    if otherwise:
        job, replayed, recorded = otherwise[0]
        said = (
            f"started {duration_text(recorded - (job.submitted_at - start).total_seconds())} "
            "after its submission in the cluster"
            if recorded is not None
            else "never started in the cluster"
        )
        again = (
            f"{duration_text(replayed - (job.submitted_at - start).total_seconds())} after "
            "it in the replay"
            if replayed is not None
            else "never in the replay"
        )
        reasons.append(
            f"{len(otherwise)} job{'s' if len(otherwise) != 1 else ''} started "
            f"otherwise than recorded; the first, #{job.pk} “{job.name}” of "
            f"{job.team.name}, submitted {_when(job.submitted_at)}, {said}, "
            f"{again}."
        )
    if len(reasons) == (1 if otherwise else 0):
        reasons.insert(
            0,
            "Nothing recorded in the window explains it (no change of "
            "configuration, hold or lost node): the cluster may have run work the "
            "portal does not record, or a scheduler configured otherwise than the "
            "portal renders it.",
        )
    return reasons


def _holds(events, *, start: datetime, end: datetime, team_ids: set[int]) -> list[str]:
    """'<team> from <when> to <when>' for each hold of a queue of `team_ids` in the window."""
    out, held = [], {}
    for e in events:
        if e.team_id not in team_ids:
            continue
        if e.verb == HOLD:
            held.setdefault(e.team_id, (e.team, e.created_at))
        elif e.verb == RELEASE and e.team_id in held:
            team, since = held.pop(e.team_id)
            out.append(f"{team.name} from {_when(since)} to {_when(e.created_at)}")
    out += [f"{team.name} from {_when(since)} on" for team, since in held.values()]
    noted = {e.team_id for e in events if e.verb in (HOLD, RELEASE)}
    out += [
        f"{team.name}, held since before the window ({team.queue_hold_reason})"
        for team in Team.objects.filter(pk__in=team_ids - noted)
        .exclude(queue_hold_reason="")
        .order_by("name")
    ]
    return out
