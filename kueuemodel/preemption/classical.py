"""Classical preemption (without fair sharing): `withinClusterQueue: LowerPriority` (or
`LowerOrNewerEqualPriority`) takes lower-priority workloads of the same ClusterQueue;
`reclaimWithinCohort: Any` / `LowerPriority` lets a ClusterQueue that fits within its nominal
quota take back what the other queues of its cohort tree borrow. Candidates go borrowers in
other queues first, then lowest priority, then most recently admitted; evicted one by one
until the workload fits, then those not needed after all are put back, the latest first.

The search takes candidates' usage off and puts it back, asking assign() each time. Where the
model's strategy has a plan for the workload (kueuemodel.flavorassigner.plan_for) and its
queue's cohort has no parent, the search works from the plan instead: what the candidates give
back is added up per ClusterQueue as charge() would take it off, and the plan's checks read it
(the same answers, without moving the counters)."""

from __future__ import annotations

from collections import defaultdict

from kueuemodel import flavorassigner


def victims(model, wl, cq) -> tuple[list, list[dict[str, str]] | None]:
    same, others = [], []
    lowest = cq.lowest_admitted_priority()
    if lowest is not None and (
        (cq.within == "LowerPriority" and lowest < wl.priority)
        or (cq.within == "LowerOrNewerEqualPriority" and lowest <= wl.priority)
    ):
        for key in cq.admitted:
            other = model.workloads[key]
            if other.priority < wl.priority or (
                cq.within == "LowerOrNewerEqualPriority"
                and other.priority == wl.priority
                and other.sort_key() > wl.sort_key()
            ):
                same.append(other)
    reclaim = cq.reclaim in ("Any", "LowerPriority")
    reclaimable = reclaimable_quota(model, wl, cq) if reclaim else {}
    if reclaimable:
        for name in model.cohort_of(cq):
            ocq = model.cqs[name]
            borrowing = [fr for fr in reclaimable if fr in ocq.quotas and ocq.usage[fr] > 0
                         and ocq.usage[fr] > ocq.quotas[fr].nominal]  # fmt: skip
            if name == cq.name or not borrowing:
                continue
            for key in ocq.admitted:
                other = model.workloads[key]
                if cq.reclaim == "LowerPriority" and other.priority >= wl.priority:
                    continue
                if any(fr in other.usage for fr in borrowing):
                    others.append(other)
    if not same and not others:
        return [], None
    if not room_without(model, wl, cq, others + same):
        # Evicting every candidate would leave no room: neither would any subset.
        return [], None
    # Borrowers in other queues first, then lowest priority, then most recently admitted.
    others.sort(key=lambda w: (w.priority, -w.admitted_seq))
    if model.afs_on(cq):  # the LocalQueue that used most loses first (then as usual)
        same.sort(key=lambda w: (-model.lq_usage((w.ns, w.queue)), w.priority, -w.admitted_seq))
    else:
        same.sort(key=lambda w: (w.priority, -w.admitted_seq))
    for candidates, reclaiming in ((others + same, True), (same, False)):
        if not candidates:
            continue
        found, assignment = _simulate(model, wl, cq, candidates, reclaiming)
        if found:
            return found, assignment
    return [], None


def reclaimable_quota(model, wl, cq) -> set[tuple[str, str]]:
    """(flavor, resource) pairs where reclaiming borrowed quota could make wl fit.

    Reclaim needs the request to fit within cq's own nominal quota, and the cohort's borrowers
    to hold at least the shortfall; anything else cannot help, so it is cheap to rule out
    before looking at individual workloads.
    """
    parent = cq.parent
    if parent is None:
        return set()
    flat = parent.parent is None and model.strategy.plan(wl, cq) is not None
    out: set[tuple[str, str]] = set()
    others = None
    for _, res, units, flavors in flavorassigner.requests(wl, cq):
        for flavor, fres in flavors:
            fr = (flavor, res)
            q = fres.get(res)
            if q is None or cq.usage[fr] + units > q.nominal:
                continue
            if flat:  # kueuemodel.cohorts' available() under a root, worked out
                used = cq.usage[fr]
                avail = max(0, q.guaranteed - used) + parent.subtree.get(fr, 0) - parent.usage[fr]
                if q.borrowing is not None:
                    avail = min(avail, q.nominal + q.borrowing - used)
                shortfall = units - max(0, avail)
            else:
                shortfall = units - model.available(cq, flavor, res)
            if others is None:
                others = [model.cqs[n] for n in model.cohort_of(cq) if n != cq.name]
            borrowed = 0
            for ocq in others:
                oq = ocq.quotas.get(fr)
                if oq is not None:
                    borrowed += max(0, ocq.usage[fr] - oq.nominal)
            if borrowed >= shortfall:
                out.add(fr)
    return out


def room_without(model, wl, cq, candidates: list) -> bool:
    """Whether wl would fit, borrowing or not, were all the candidates evicted (their usage
    taken off as one sum per ClusterQueue: the counters end the same)."""
    plan = _victim_plan(model, wl, cq, candidates)
    if plan is not None:
        freed: dict[str, dict[tuple[str, str], int]] = {}
        for cand in candidates:
            _give_back(freed, plan, cand, 1)
        return flavorassigner.fit(model, cq, plan, freed)[0] is not None
    freed = defaultdict(lambda: defaultdict(int))
    for cand in candidates:
        for fr, units in cand.usage.items():
            freed[cand.cq][fr] += units
    for name, usage in freed.items():
        model.charge(model.cqs[name], usage, -1)
    try:
        return model.assign(wl, cq)[0] is not None
    finally:
        for name, usage in freed.items():
            model.charge(model.cqs[name], usage, +1)


def _simulate(
    model, wl, cq, candidates: list, reclaiming: bool
) -> tuple[list, list[dict[str, str]] | None]:
    """Candidates evicted in order until wl fits (reclaiming other queues' quota only within
    its nominal quota), then those not needed put back, the latest first."""
    plan = _victim_plan(model, wl, cq, candidates)
    if plan is not None:
        return _simulate_by_plan(model, wl, cq, candidates, reclaiming, plan)
    removed: list = []
    found = None
    try:
        for cand in candidates:
            model.charge(model.cqs[cand.cq], cand.usage, -1)
            removed.append(cand)
            assignment, borrows, _ = model.assign(wl, cq)
            # Reclaiming other queues' quota is only allowed within nominal quota.
            if assignment is not None and not (
                borrows and reclaiming and any(c.cq != cq.name for c in removed)
            ):
                found = assignment
                break
        if found is None:
            return [], None
        # Put back the candidates that were not needed after all (latest first).
        for cand in reversed(removed[:-1]):
            model.charge(model.cqs[cand.cq], cand.usage, +1)
            assignment, borrows, _ = model.assign(wl, cq)
            if assignment is not None and not (
                borrows and reclaiming and any(c.cq != cq.name for c in removed if c is not cand)
            ):
                removed.remove(cand)
                found = assignment
            else:
                model.charge(model.cqs[cand.cq], cand.usage, -1)
        return list(removed), found
    finally:
        for cand in removed:
            model.charge(model.cqs[cand.cq], cand.usage, +1)


def _simulate_by_plan(model, wl, cq, candidates, reclaiming, plan):
    freed: dict[str, dict[tuple[str, str], int]] = {}
    removed: list = []
    found = None
    for cand in candidates:
        _give_back(freed, plan, cand, 1)
        removed.append(cand)
        flavor, borrows = flavorassigner.fit(model, cq, plan, freed)
        if flavor is not None:
            wl.tas_plan = [None]  # as assign() leaves it
            if not (borrows and reclaiming and any(c.cq != cq.name for c in removed)):
                found = flavor
                break
    if found is None:
        return [], None
    for cand in reversed(removed[:-1]):
        _give_back(freed, plan, cand, -1)
        flavor, borrows = flavorassigner.fit(model, cq, plan, freed)
        if flavor is not None:
            wl.tas_plan = [None]
        if flavor is not None and not (
            borrows and reclaiming and any(c.cq != cq.name for c in removed if c is not cand)
        ):
            removed.remove(cand)
            found = flavor
        else:
            _give_back(freed, plan, cand, 1)
    return list(removed), [dict.fromkeys(wl.podsets[0].per_pod, found)]


def _victim_plan(model, wl, cq, candidates: list) -> list | None:
    """The plan to work the search's checks out with, or None (charge and assign): the
    queue's cohort has no parent (or it has none), and candidates in other trees hold nothing
    the plan reads."""
    plan = model.strategy.plan(wl, cq)
    parent = cq.parent
    if plan is None or (parent is not None and parent.parent is not None):
        return None
    for cand in candidates:
        if cand.cq != cq.name and (parent is None or model.cqs[cand.cq].parent is not parent):
            for _, checks in plan:
                if any(cand.usage.get(fr) for fr, _, _ in checks):
                    return None
    return plan


def _give_back(freed: dict, plan: list, cand, sign: int) -> None:
    """Count (sign 1) or no longer count (-1) what cand holds of the plan's quota as freed,
    per ClusterQueue."""
    for _, checks in plan:
        for fr, _, _ in checks:
            units = cand.usage.get(fr)
            if units:
                per_cq = freed.setdefault(cand.cq, {})
                per_cq[fr] = per_cq.get(fr, 0) + sign * units
