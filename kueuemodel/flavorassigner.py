"""Flavor assignment (Kueue's flavorassigner): for each pod set, per resource group, the first
flavor of the ClusterQueue's list that suits the pod set (node labels, taints) and still has
the quota, borrowing included (`whenCanBorrow: MayStopSearch`); a pod set with a topology
request also needs a domain of the flavor's topology to hold all its pods. All or nothing: a
workload gets a flavor for every pod set, or none and Kueue's message why."""

from __future__ import annotations

from collections import Counter, defaultdict

from kueuemodel import cohorts, tas
from kueuemodel.resources import GPU, format_units
from kueuemodel.selectors import expression_matches, required_terms, taint_text, untolerated


def assign(model, wl, cq) -> tuple[list[dict[str, str]] | None, bool, str]:
    """Flavors for every pod set: (assignment or None, borrows, pending message). Where the
    model's strategy knows the workload's flavors in advance (a plan), the same answer from
    the plan, without the message."""
    plan = model.strategy.plan(wl, cq)
    if plan is not None:
        return _assign_by_plan(wl, cq, plan)
    assignment: list[dict[str, str]] = []
    taken: dict[tuple[str, str], int] = defaultdict(int)
    tas_taken: dict[tuple[str, tuple], Counter] = defaultdict(Counter)
    plans: list = []
    borrows = False
    for ps in wl.podsets:
        total = ps.total()
        chosen: dict[str, str] = {}
        ps_plan = None
        # Kueue admits only what its ClusterQueue accounts for: a request for a resource no
        # resource group covers leaves the workload pending (its excludeResourcePrefixes
        # setting, not modelled here, is the way around that).
        uncovered = sorted(res for res in total if res not in cq.group_of)
        if uncovered:
            return (
                None,
                False,
                (
                    f"couldn't assign flavors to pod set {ps.name}: "
                    f"resource {uncovered[0]} unavailable in ClusterQueue"
                ),
            )
        by_group: dict[int, dict[str, int]] = defaultdict(dict)
        for res, units in total.items():
            by_group[cq.group_of[res]][res] = units
        for gi in sorted(by_group):
            requests = by_group[gi]
            reasons = []
            picked = None
            for flavor, fres in cq.groups[gi][1]:
                why = mismatch(model, flavor, ps)
                if why:
                    reasons.append(why)
                    continue
                fail = ""
                flavor_borrows = False
                for res, units in sorted(requests.items(), key=_gpu_first):
                    need = units + taken[(flavor, res)]
                    if res not in fres:
                        fail = f"resource {res} unavailable in ClusterQueue"
                        break
                    cap = model.capacity(cq, flavor, res)
                    if need > cap:
                        # Kueue says so in one form, whether or not an earlier pod set of
                        # the workload took some of the flavor already.
                        fail = (
                            f"insufficient quota for {res} in flavor {flavor}, previously "
                            f"considered podsets requests ({_fmt(res, taken[(flavor, res)])}) + "
                            f"current podset request ({_fmt(res, units)}) > maximum capacity "
                            f"({_fmt(res, cap)})"
                        )
                        break
                    avail = model.available(cq, flavor, res)
                    if need > avail:
                        fail = (
                            f"insufficient unused quota for {res} in flavor {flavor}, "
                            f"{_fmt(res, need - avail)} more needed"
                        )
                        break
                    if cq.usage[(flavor, res)] + need > fres[res].nominal:
                        flavor_borrows = True
                if fail:
                    reasons.append(fail)
                    continue
                if ps.topology is not None and ps_plan is None:
                    ps_plan, fail = _place_topology(model, ps, flavor, tas_taken)
                    if fail:
                        model.tas_blocked.add(cq.name)
                        reasons.append(fail)
                        continue
                picked = flavor
                borrows = borrows or flavor_borrows
                break
            if picked is None:
                msg = f"couldn't assign flavors to pod set {ps.name}: " + "; ".join(reasons)
                return None, False, msg
            for res, units in requests.items():
                chosen[res] = picked
                taken[(picked, res)] += units
        assignment.append(chosen)
        plans.append(ps_plan)
    wl.tas_plan = plans
    return assignment, borrows, ""


def usage_of(wl, assignment: list[dict[str, str]]) -> dict[tuple[str, str], int]:
    """(flavor, resource) -> units the workload holds with this assignment."""
    usage: dict[tuple[str, str], int] = defaultdict(int)
    for ps, flavors in zip(wl.podsets, assignment, strict=True):
        for res, units in ps.total().items():
            if res in flavors:
                usage[(flavors[res], res)] += units
    return dict(usage)


def requests(wl, cq):
    """(pod set, resource, units, the flavors of the resource group covering it) for each
    resource a pod set requests that the queue covers."""
    for ps in wl.podsets:
        for res, units in ps.total().items():
            gi = cq.group_of.get(res)
            if gi is not None:
                yield ps, res, units, cq.groups[gi][1]


def request_on_flavor(model, wl, cq) -> dict[tuple[str, str], int]:
    """The usage wl would add in cq: each resource on the first flavor that suits its pod set
    (the flavor assign() tries first)."""
    usage: dict[tuple[str, str], int] = defaultdict(int)
    for ps, res, units, flavors in requests(wl, cq):
        for flavor, fres in flavors:
            if res in fres and not mismatch(model, flavor, ps):
                usage[(flavor, res)] += units
                break
    return dict(usage)


# -- whether a flavor suits a pod set ----------------------------------------------------------


def mismatch(model, flavor: str, ps) -> str:
    """flavor_mismatch for a pod set, worked out once per flavor generation."""
    key = (model.flavor_generation, flavor)
    why = ps.mismatch.get(key)
    if why is None:
        if len(ps.mismatch) > 16:
            ps.mismatch.clear()
        why = ps.mismatch[key] = flavor_mismatch(model.flavors, flavor, ps.spec)
    return why


def flavor_mismatch(flavors: dict[str, dict], flavor: str, spec: dict) -> str:
    """Why a flavor cannot take pods of this template ("" when it can): its node labels
    contradict their node selector or required affinity, or its taints are not tolerated."""
    fobj = flavors.get(flavor) or {}
    fspec = fobj.get("spec") or {}
    node_labels = fspec.get("nodeLabels") or {}
    selector = spec.get("nodeSelector") or {}
    for key, value in node_labels.items():
        if key in selector and selector[key] != value:
            return f"flavor {flavor} doesn't match node affinity"
    terms = required_terms(spec)
    if terms and node_labels:
        ok = False
        for term in terms:
            exprs = [e for e in term.get("matchExpressions") or [] if e.get("key") in node_labels]
            if all(expression_matches(e, node_labels) for e in exprs):
                ok = True
                break
        if not ok:
            return f"flavor {flavor} doesn't match node affinity"
    taints = fspec.get("nodeTaints") or []
    if taints:
        bad = untolerated(
            taints, list(spec.get("tolerations") or []) + list(fspec.get("tolerations") or [])
        )
        if bad:
            return f"untolerated taint {{{taint_text(bad[0])}}} in flavor {flavor}"
    return ""


# -- topology (Kueue's tas_flavorassigner) -----------------------------------------------------


def _place_topology(model, ps, flavor: str, taken: dict) -> tuple[tuple | None, str]:
    """Where a pod set's pods go in the flavor's topology: ((topology, pods per domain), "")
    or (None, Kueue's reason)."""
    fspec = (model.flavors.get(flavor) or {}).get("spec") or {}
    topo = fspec.get("topologyName")
    if not topo:
        return None, f'Flavor "{flavor}" does not support TopologyAwareScheduling'
    levels = model.topologies.get(topo)
    if levels is None:
        return None, f'topology "{topo}" not found'
    label = ps.topology.get("required") or ps.topology.get("preferred")
    if label not in levels:
        return None, f'topology "{topo}" has no level {label}'
    tolerations = list(ps.spec.get("tolerations") or []) + list(fspec.get("tolerations") or [])
    fit = {}
    node_labels = fspec.get("nodeLabels") or {}
    for leaf, free in model.nodes.leaves(levels, node_labels, tolerations).items():
        for held in (model.tas_used.get((topo, leaf)), taken.get((topo, leaf))):
            if held:
                free = free - held
        fit[leaf] = tas.fits(free, ps.per_pod)
    plan, most = tas.place(levels, fit, ps.count, ps.topology) if fit else (None, 0)
    if plan is None:
        return None, f'topology "{topo}" allows to fit only {most} out of {ps.count} pod(s)'
    for leaf, n in plan.items():
        taken[(topo, leaf)].update({res: units * n for res, units in ps.per_pod.items()})
    return (topo, plan), ""


# -- plans: the checks of a workload whose flavors are known in advance ------------------------
#
# A workload of one pod set whose resources one resource group covers, with no topology
# request (every workload of a replay), is tried on the same flavors with the same quota checks
# each time: its plan lists them, and the checks read the usage counters directly. For a queue
# of a cohort without a parent (every queue the portal makes), kueuemodel.cohorts' arithmetic
# is worked out here; a deeper tree's goes through it.


def plan_for(model, wl, cq) -> list | None:
    """The flavors assign() tries for the workload in the ClusterQueue, in order, with the
    quota it checks in each: [(flavor, [((flavor, resource), units, quota)])]; None for a
    workload assign() must look at itself (several pod sets or resource groups, a topology
    request, a resource no group covers)."""
    if len(wl.podsets) != 1 or wl.podsets[0].topology:
        return None
    ps = wl.podsets[0]
    total = ps.total()
    groups = {cq.group_of.get(res) for res in total}
    if len(groups) != 1 or None in groups:
        return None
    plan = []
    for flavor, fres in cq.groups[groups.pop()][1]:
        if mismatch(model, flavor, ps) or any(res not in fres for res in total):
            continue
        plan.append((flavor, [((flavor, res), units, fres[res]) for res, units in total.items()]))
    return plan


def _assign_by_plan(wl, cq, plan: list) -> tuple[list[dict[str, str]] | None, bool, str]:
    """assign() from the workload's plan: the same flavor and borrowing, no message."""
    usage = cq.usage
    parent = cq.parent
    root = parent if parent is not None and parent.parent is None else None
    for flavor, checks in plan:
        borrows = False
        for fr, units, q in checks:
            used = usage[fr]
            if parent is None:
                cap, avail = q.nominal, q.nominal - used
            elif root is not None:
                lend_cap = root.subtree.get(fr, 0)
                cap = q.guaranteed + lend_cap
                avail = max(0, q.guaranteed - used) + lend_cap - root.usage[fr]
                if q.borrowing is not None:
                    cap = min(cap, q.nominal + q.borrowing)
                    avail = min(avail, q.nominal + q.borrowing - used)
            else:
                cap, avail = cohorts.potential(cq, fr), cohorts.available(cq, fr)
            if units > cap or units > avail:
                break
            if used + units > q.nominal:
                borrows = True
        else:
            wl.tas_plan = [None]
            return [dict.fromkeys(wl.podsets[0].per_pod, flavor)], borrows, ""
    return None, False, ""


def fit(model, cq, plan: list, freed: dict) -> tuple[str | None, bool]:
    """assign() from a plan with `freed` (ClusterQueue name -> (flavor, resource) -> units)
    taken off, for a queue of a cohort without a parent or of none: (the flavor, borrows) or
    (None, False)."""
    parent = cq.parent
    mine = freed.get(cq.name, {})
    for flavor, checks in plan:
        borrows = False
        for fr, units, q in checks:
            used = cq.usage[fr] - mine.get(fr, 0)
            if parent is None:
                cap, avail = q.nominal, q.nominal - used
            else:
                above = parent.usage[fr]
                for name, per_cq in freed.items():
                    taken = per_cq.get(fr)
                    if taken:
                        ocq = model.cqs[name]
                        before, keep = ocq.usage[fr], ocq.local.get(fr, 0)
                        above += max(0, before - taken - keep) - max(0, before - keep)
                lend_cap = parent.subtree.get(fr, 0)
                cap = q.guaranteed + lend_cap
                avail = max(0, q.guaranteed - used) + lend_cap - above
                if q.borrowing is not None:
                    cap = min(cap, q.nominal + q.borrowing)
                    avail = min(avail, q.nominal + q.borrowing - used)
            if units > cap or units > avail:
                break
            if used + units > q.nominal:
                borrows = True
        else:
            return flavor, borrows
    return None, False


def _gpu_first(item: tuple[str, int]) -> tuple[int, str]:
    return (0 if item[0] == GPU else 1, item[0])


def _fmt(res: str, units: int) -> str:
    return format_units(res, units)
