"""What-if pages: draft a proposal (quotas, pool sizes, tier values) on today's figures, replay
the last days of jobs against it beside today's configuration, and apply it."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from core.roles import is_manager, is_platform_admin
from core.text import ascii_digits
from fleet.models import NodePool
from planning.services import whatif
from queues.manifests.quotas import fair_share_weight_text
from queues.models import Department, PriorityTier, Quota
from queues.selectors.quotas import pool_capacity
from queues.selectors.tenancy import team_list


def _require(user) -> None:
    if not (is_manager(user) or is_platform_admin(user)):
        raise PermissionDenied("What-if runs are for department managers and platform admins.")


def _draft_rows(user):
    """The quotas the user may change (current values), the pools and the tiers."""
    teams = list(whatif.whatif_teams(user=user))
    quotas = list(
        Quota.objects.filter(team__in=teams).select_related("team", "pool", "pool__cluster")
    )
    for q in quotas:
        q.form_key = f"{q.team_id}-{q.pool_id}"
    pools = list(NodePool.objects.select_related("cluster").filter(quotas__team__in=teams)
                 .distinct())  # fmt: skip
    for pool in pools:
        pool.capacity = pool_capacity(pool=pool)["capacity"]
    for team in teams:
        team.weight_text = fair_share_weight_text(team.fair_share_weight)
    return quotas, pools, list(PriorityTier.objects.all()), teams


def _changed(post, quotas, pools, tiers, teams):
    """The proposal entries that differ from today (as typed: the service checks them), and
    for each quota and weight entry the row it came from, to put errors back beside it."""

    def typed(name, current):
        if name not in post:  # not sent: unchanged
            return current
        raw = post.get(name, "").strip()
        if raw == "" and current is None:
            return None
        return raw

    entries, sources = [], []
    for q in quotas:
        key = f"{q.team_id}-{q.pool_id}"
        values = {
            "nominal_gpus": typed(f"nominal-{key}", q.nominal_gpus),
            "borrowing_limit": typed(f"borrowing-{key}", q.borrowing_limit),
            "lending_limit": typed(f"lending-{key}", q.lending_limit),
        }
        now = {"nominal_gpus": q.nominal_gpus, "borrowing_limit": q.borrowing_limit,
               "lending_limit": q.lending_limit}  # fmt: skip
        if any(str(values[k]) != str(now[k]) for k in values):
            entries.append({"team": q.team.slug, "pool": q.pool_id, **values})
            sources.append(q)
    sizes = []
    for pool in pools:
        raw = post.get(f"size-{pool.pk}", "").strip()
        if raw and raw != str(pool.capacity):
            sizes.append({"pool": pool.pk, "gpus": raw})
    tier_values = []
    for tier in tiers:
        raw = post.get(f"tier-{tier.name}", "").strip()
        if raw and raw != str(tier.value):
            try:
                tier_values.append({"tier": tier.name, "value": int(raw)})
            except ValueError:
                tier_values.append({"tier": tier.name, "value": raw})
    weights, weighed = [], []
    for team in teams:
        raw = post.get(f"weight-{team.pk}", "").strip()
        if raw and raw != team.weight_text:
            weights.append({"team": team.slug, "weight": raw})
            weighed.append(team)
    # A box per team, sent when ticked; the form says it carried them (unticked ones are off).
    shared = []
    if "members-shown" in post:
        for team in teams:
            wanted = f"members-{team.pk}" in post
            if wanted != team.member_fair_sharing:
                shared.append({"team": team.slug, "enabled": wanted})
    departments, department_rows = [], []
    if "departments-shown" in post:  # platform admins: a box and a weight per department
        for d in Department.objects.order_by("slug"):
            entry = {}
            wanted = f"org-{d.pk}" in post
            if wanted != d.shares_with_organisation:
                entry["shares_with_organisation"] = wanted
            raw = post.get(f"org-weight-{d.pk}", "").strip()
            if raw and raw != fair_share_weight_text(d.fair_share_weight):
                entry["weight"] = raw
            if entry:
                departments.append({"department": d.slug, **entry})
                department_rows.append(d)
    fair = {"on": True, "off": False}.get(post.get("fair_sharing", ""))
    proposal = {"quotas": entries, "pool_sizes": sizes, "tiers": tier_values,
                "weights": weights, "fair_sharing": fair,
                "member_fair_sharing": shared, "departments": departments}  # fmt: skip
    return proposal, {"quotas": sources, "weights": weighed, "departments": department_rows}


@login_required
def whatif_list(request):
    _require(request.user)
    quotas, pools, tiers, teams = _draft_rows(request.user)
    errors: list[str] = []
    if request.method == "POST":
        proposal, sources = _changed(request.POST, quotas, pools, tiers, teams)
        days = request.POST.get("days", "30").strip()
        try:
            run = whatif.whatif_create(
                actor=request.user, name=request.POST.get("name", ""),
                days=int(days) if ascii_digits(days) else -1, **proposal,
            )  # fmt: skip
        except ValidationError as exc:
            for field, texts in exc.message_dict.items():
                where = field
                if field.startswith("quotas[") and "]" in field:
                    i = int(field[7 : field.index("]")])
                    q = sources["quotas"][i]
                    where = f"{q.team.name} · {q.pool.name} ({field.split('.')[-1]})"
                elif field.startswith("weights[") and "]" in field:
                    team = sources["weights"][int(field[8 : field.index("]")])]
                    where = f"{team.name} (fair-sharing weight)"
                elif field.startswith("departments[") and "]" in field:
                    department = sources["departments"][int(field[12 : field.index("]")])]
                    where = f"{department.name} (sharing with the organisation)"
                errors += [f"{where}: {t}" for t in texts]
        else:
            messages.success(request, "Replaying the last days against your proposal…")
            return redirect("quota-whatif-detail", pk=run.pk)
    return render(
        request,
        "planning/whatif_list.html",
        {
            "runs": whatif.whatif_runs(user=request.user)[:20],
            "quotas": quotas,
            "pools": pools,
            "tiers": tiers,
            "teams": teams,
            "errors": errors,
            "post": request.POST if request.method == "POST" else {},
            "half_life_hours": settings.FAIR_SHARE_HALF_LIFE_HOURS,
            "departments": _departments(request.user),
        },  # fmt: skip
        status=400 if errors else 200,
    )


def _departments(user) -> list:
    """The departments whose sharing with the organisation a platform admin may propose to
    change (none for anyone else)."""
    if not is_platform_admin(user):
        return []
    departments = list(Department.objects.order_by("name"))
    for d in departments:
        d.weight_text = fair_share_weight_text(d.fair_share_weight)
    return departments


def _run_or_404(request, pk):
    _require(request.user)
    run = whatif.whatif_runs(user=request.user).filter(pk=pk).first()
    if run is None:
        raise Http404("No such what-if run.")
    return run


def _comparison(run, user):
    """Rows of the result the user may see: per team (theirs) and per pool, both scenarios."""
    if not run.result:
        return [], []
    teams = {str(t.pk): t for t in team_list(user=user)}
    today, proposal = run.result["today"], run.result["proposal"]
    team_rows = [
        {
            "team": teams[tid],
            "today": today["teams"].get(tid, {}),
            "proposal": proposal["teams"].get(tid, {}),
        }  # fmt: skip
        for tid in sorted(
            set(today["teams"]) | set(proposal["teams"]),
            key=lambda t: teams[t].name if t in teams else "",
        )  # fmt: skip
        if tid in teams
    ]
    for row in team_rows:  # teams sharing their queue among members: each member's waits
        now, then = row["today"].get("members") or {}, row["proposal"].get("members") or {}
        row["members"] = [{"username": name, "today": now.get(name, {}),
                           "proposal": then.get(name, {})}
                          for name in sorted(set(now) | set(then))]  # fmt: skip
    pool_rows = [
        {"today": today["pools"][pid], "proposal": proposal["pools"].get(pid, {})}
        for pid in today["pools"]
    ]
    return team_rows, pool_rows


def _changes(run):
    teams = {t.pk: t for t in whatif.whatif_teams(user=run.created_by)}
    pools = NodePool.objects.in_bulk(
        [q["pool"] for q in run.proposal.get("quotas", [])]
        + [p["pool"] for p in run.proposal.get("pool_sizes", [])]
    )
    tiers = dict(PriorityTier.objects.values_list("pk", "name"))
    lines = []
    for q in run.proposal.get("quotas", []):
        team, pool = teams.get(q["team"]), pools.get(q["pool"])
        limits = ", ".join(
            f"{label} {q[k] if q[k] is not None else 'none'}"
            for k, label in (("borrowing_limit", "may borrow"), ("lending_limit", "lends at most"))
        )
        lines.append(f"{team.name if team else q['team']} in {pool.name if pool else q['pool']}: "
                     f"{q['nominal_gpus']} GPUs ({limits})")  # fmt: skip
    for p in run.proposal.get("pool_sizes", []):
        pool = pools.get(p["pool"])
        lines.append(f"Pool {pool.name if pool else p['pool']}: {p['gpus']} GPUs")
    for t in run.proposal.get("tiers", []):
        lines.append(f"Tier {tiers.get(t['tier'], t['tier'])}: priority {t['value']}")
    for w in run.proposal.get("weights", []):
        team = teams.get(w["team"])
        lines.append(f"{team.name if team else w['team']}: fair-sharing weight {w['weight']}")
    for m in run.proposal.get("member_fair_sharing", []):
        team = teams.get(m["team"])
        name = team.name if team else m["team"]
        lines.append(f"{name} shares its queue fairly among its members" if m["enabled"]
                     else f"{name} stops sharing its queue among its members")  # fmt: skip
    names = dict(Department.objects.values_list("pk", "name"))
    for d in run.proposal.get("departments", []):
        name = names.get(d["department"], d["department"])
        said = []
        if d["shares_with_organisation"] is not None:
            said.append("shares idle GPUs with the organisation" if d["shares_with_organisation"]
                        else "stops sharing idle GPUs with the organisation")  # fmt: skip
        if d["weight"] is not None:
            said.append(f"weight {d['weight']} among the departments that share")
        lines.append(f"{name} {' and '.join(said)}")
    if "fair_sharing" in run.proposal:
        lines.append(f"Fair sharing {'on' if run.proposal['fair_sharing'] else 'off'}")
    return lines


@login_required
def whatif_detail(request, pk):
    run = _run_or_404(request, pk)
    team_rows, pool_rows = _comparison(run, request.user)
    template = "planning/_whatif_result.html" if request.htmx else "planning/whatif.html"
    return render(
        request,
        template,
        {
            "run": run,
            "team_rows": team_rows,
            "pool_rows": pool_rows,
            "changes": _changes(run),
            # The waits as they happened stand beside the replay only where the replay of today's
            # configuration agrees with them (runs from before that check: as they were shown).
            "show_recorded": (run.result or {}).get("agreement", {}).get("agrees", True),
            "can_apply": run.state == "done"
            and run.applied_at is None
            and (run.created_by_id == request.user.pk or is_platform_admin(request.user)),
        },  # fmt: skip
    )


@login_required
@require_POST
def whatif_apply(request, pk):
    run = _run_or_404(request, pk)
    try:
        filed = whatif.whatif_apply(actor=request.user, run=run)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        messages.success(
            request,
            f"Filed {len(filed)} quota request{'s' if len(filed) != 1 else ''}: "
            "they are decided like any other.",
        )
    return redirect("quota-whatif-detail", pk=pk)
