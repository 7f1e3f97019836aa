"""Fair-sharing preemption (Kueue's, with fair sharing on: pkg/scheduler/preemption/fairsharing):
victims are chosen by dominant resource share down the cohort tree, with Kueue's default
strategies LessThanOrEqualToFinalShare, then LessThanInitialShare."""

from __future__ import annotations

import functools
from collections import defaultdict

from kueuemodel import cohorts, flavorassigner
from kueuemodel.preemption import classical
from kueuemodel.preemption.ordering import candidate_cmp


def victims(model, wl, cq) -> tuple[list, list[dict[str, str]] | None]:
    """Victims for wl under fair sharing, as Kueue chooses them: candidates are its own
    queue's admitted workloads its withinClusterQueue policy may take, and those of the tree's
    queues that borrow what it asks for that its reclaimWithinCohort policy may take. With
    wl's usage added, targets go queue by queue, the highest share first (down the tree, see
    Targets): from its own queue by priority; while its queue stays within nominal quota, from
    others without more ado; otherwise only while its share stays at most the target's after
    the eviction (LessThanOrEqualToFinalShare), and failing that, one workload per queue while
    it is below the target's share before (LessThanInitialShare); shares compared below the
    Cohort both queues are under. Then every victim not needed after all, the latest first, is
    put back."""
    request = flavorassigner.request_on_flavor(model, wl, cq)
    frs = set(request)
    candidates = _candidates(model, wl, cq, frs)
    if not candidates or not classical.room_without(model, wl, cq, candidates):
        return [], None
    candidates.sort(key=functools.cmp_to_key(lambda a, b: candidate_cmp(model, a, b, cq)))
    removed: list = []
    model.charge(cq, request, +1)
    try:
        fits, retry = _first(model, wl, cq, request, candidates, removed)
        if not fits and retry:
            fits = _second(model, wl, cq, request, retry, removed)
    finally:
        model.charge(cq, request, -1)
    try:
        if not fits:
            # The strategies refused: unlike "no room", which holds for any workload larger or
            # of lower priority, their verdict depends on the order victims were weighed.
            model.refused = True
            return [], None
        # Put back, latest first, those it fits without (Kueue's fill-back: the last victim
        # takes the place of one put back).
        for i in range(len(removed) - 2, -1, -1):
            back = removed[i]
            model.charge(model.cqs[back.cq], back.usage, +1)
            if model.assign(wl, cq)[0] is not None:
                removed[i] = removed[-1]
                removed.pop()
            else:
                model.charge(model.cqs[back.cq], back.usage, -1)
        assignment = model.assign(wl, cq)[0]
        return (list(removed), assignment) if assignment is not None else ([], None)
    finally:
        for v in removed:
            model.charge(model.cqs[v.cq], v.usage, +1)


def has_room(model, wl, cq) -> bool:
    """Whether wl would fit were every workload it may preempt evicted: what victims() asks
    first. Unlike victims(), it is monotone in wl's size: its candidates do not depend on it."""
    candidates = _candidates(model, wl, cq, set(flavorassigner.request_on_flavor(model, wl, cq)))
    return bool(candidates) and classical.room_without(model, wl, cq, candidates)


def _candidates(model, wl, cq, frs: set) -> list:
    def allowed(other, policy: str) -> bool:
        if not any(fr in other.usage for fr in frs):
            return False
        if policy == "Any":
            return True
        if other.priority < wl.priority:
            return policy in ("LowerPriority", "LowerOrNewerEqualPriority")
        return (policy == "LowerOrNewerEqualPriority" and other.priority == wl.priority
                and other.sort_key() > wl.sort_key())  # fmt: skip

    out = []
    if cq.within != "Never":
        out += [w for k in cq.admitted if allowed(w := model.workloads[k], cq.within)]
    if cq.parent is not None and cq.reclaim != "Never":
        for name in model.cohort_of(cq):
            ocq = model.cqs[name]
            if name == cq.name or not any(ocq.usage[fr] > ocq.subtree.get(fr, 0)
                                          for fr in frs):  # fmt: skip
                continue
            out += [w for k in ocq.admitted if allowed(w := model.workloads[k], cq.reclaim)]
    return out


def _fits_without(model, wl, cq, request: dict) -> bool:
    """Whether wl fits now, its own usage (added while shares are weighed) taken off."""
    model.charge(cq, request, -1)
    try:
        return model.assign(wl, cq)[0] is not None
    finally:
        model.charge(cq, request, +1)


def _evict_for(model, victim, removed: list, fair: bool = False) -> None:
    victim.fair_victim = fair
    model.charge(model.cqs[victim.cq], victim.usage, -1)
    removed.append(victim)


def _first(model, wl, cq, request, candidates, removed) -> tuple[bool, list]:
    """Kueue's first pass (its rules S2-a, and the queue's own or within-nominal targets):
    (fits, the candidates the strategy refused, to try again)."""
    targets = Targets(model, cq, candidates)
    retry: list = []
    within = all(cq.usage[fr] <= cq.subtree.get(fr, 0) for fr in request)
    for target in targets:
        if target is cq or within:
            _evict_for(model, targets.pop(target), removed)
            if _fits_without(model, wl, cq, request):
                return True, retry
            continue
        mine, theirs = targets.shares(target)
        if mine.infinite and not theirs.infinite:
            while targets.has(target):  # no workload of theirs can pass
                retry.append(targets.pop(target))
            continue
        while targets.has(target):
            victim = targets.pop(target)
            model.charge(target, victim.usage, -1)
            try:
                after = targets.shares(target)[1]
            finally:
                model.charge(target, victim.usage, +1)
            if mine.key <= after.key:
                _evict_for(model, victim, removed, fair=True)
                if _fits_without(model, wl, cq, request):
                    return True, retry
                break
            retry.append(victim)
    return False, retry


def _second(model, wl, cq, request, retry, removed) -> bool:
    """Kueue's second pass (rule S2-b): one refused candidate per queue, highest share first,
    while wl's share is below the target's before the eviction."""
    targets = Targets(model, cq, retry)
    for target in targets:
        mine, theirs = targets.shares(target)
        victim = targets.pop(target)
        if mine.key < theirs.key:
            _evict_for(model, victim, removed, fair=True)
            if _fits_without(model, wl, cq, request):
                return True
        targets.drop(target)
    return False


class Targets:
    """The ClusterQueues fair-sharing preemption takes from, in Kueue's order (its
    TargetClusterQueueOrdering): iterating yields, again and again until none is left, the queue
    found by walking down from the root, at each Cohort to the child Cohort or ClusterQueue
    with the highest share (a Cohort when it is no lower; equal queues by their first
    candidates), passing over, for good, queues that borrow nothing (other than the
    preemptor's) or have no candidate left, and Cohorts that borrow nothing unless the
    preemptor is below them."""

    def __init__(self, model, cq, candidates: list):
        self.model, self.cq = model, cq
        self.by_cq: dict[str, list] = defaultdict(list)
        for wl in candidates:
            self.by_cq[wl.cq].append(wl)
        self.ancestors = {co.name for co in (cq.parent.path() if cq.parent else [])}
        self.pruned_cqs: set[str] = set()
        self.pruned_cohorts: set[str] = set()

    def __iter__(self):
        cq = self.cq
        if cq.parent is None:
            while cq.name not in self.pruned_cqs and self.has(cq):
                yield cq
            return
        root = cq.parent.root
        while root.name not in self.pruned_cohorts:
            target = self._next(root)
            if target is not None:
                yield target

    def has(self, cq) -> bool:
        return bool(self.by_cq.get(cq.name))

    def pop(self, cq):
        return self.by_cq[cq.name].pop(0)

    def drop(self, cq) -> None:
        self.pruned_cqs.add(cq.name)

    def _next(self, cohort: cohorts.Cohort):
        best_cq, best_cq_share = None, cohorts.BELOW_ANY
        for cq in cohort.child_cqs:
            if cq.name in self.pruned_cqs:
                continue
            share = cohorts.share(cq)
            if (not share.borrowing and cq is not self.cq) or not self.has(cq):
                self.pruned_cqs.add(cq.name)
            elif share.key == best_cq_share.key:
                mine, theirs = self.by_cq[cq.name][0], self.by_cq[best_cq.name][0]
                if candidate_cmp(self.model, mine, theirs, self.cq) < 0:
                    best_cq = cq
            elif share.key > best_cq_share.key:
                best_cq, best_cq_share = cq, share
        best_co, best_co_share = None, cohorts.BELOW_ANY
        for co in cohort.child_cohorts:
            if co.name in self.pruned_cohorts:
                continue
            share = cohorts.share(co)
            if not share.borrowing and co.name not in self.ancestors:
                self.pruned_cohorts.add(co.name)
            elif share.key >= best_co_share.key:
                best_co, best_co_share = co, share
        if best_co is None and best_cq is None:
            self.pruned_cohorts.add(cohort.name)
            return None
        if best_co_share.key >= best_cq_share.key:
            return self._next(best_co)
        return best_cq

    def shares(self, target) -> tuple[cohorts.Share, cohorts.Share]:
        """The preemptor's and the target's shares where their paths meet: each of the two
        children of their lowest common Cohort that they are under (or are)."""
        lca = next(co for co in target.parent.path() if co.name in self.ancestors)

        def below(cq):
            node = cq
            while node.parent is not lca:
                node = node.parent
            return node

        return cohorts.share(below(self.cq)), cohorts.share(below(target))
