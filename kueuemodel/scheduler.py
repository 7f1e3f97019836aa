"""The scheduling cycle (Kueue's pkg/scheduler): the ClusterQueues with something new to try go
through two passes, first admitting what fits without borrowing, then the borrowers, the queue
whose head comes first (priority, then age) first; under fair sharing the borrowing pass is a
tournament over each cohort tree (Kueue's fair sharing iterator)."""

from __future__ import annotations

from collections import defaultdict

from kueuemodel import cohorts, flavorassigner


def schedule(model) -> int:
    """Admit what fits; returns the number of admissions."""
    if model.rebuild_needed:
        model.rebuild()
        model.drain()
    model.afs_sample()
    admitted = 0
    # A workload evicted in this round does not preempt others in it: its quota frees only
    # once its pods are gone, and otherwise reclaim and priority could evict each other round
    # and round at one instant (a borrower reclaimed by a lower priority, which is preempted in
    # its own queue by one its first victim's queue then reclaims from).
    model.evicted_now = set()
    while model.dirty_cqs:
        names = sorted(model.dirty_cqs)
        model.dirty_cqs.clear()
        # Workloads that fit without borrowing go first, as in Kueue's cycle ordering; then the
        # borrowers, the ClusterQueue whose head comes first (priority, then age) first.
        for allow_borrow in (False, True):
            if allow_borrow and model.fair_sharing:
                admitted += _schedule_fair(model, names)
                continue
            if allow_borrow:
                names.sort(key=lambda name: _head_order(model, name))
            for name in names:
                cq = model.cqs.get(name)
                if cq is not None:
                    admitted += model.strategy.schedule_cq(cq, allow_borrow)
    return admitted


def _head_order(model, name: str) -> tuple:
    """Where a ClusterQueue's head stands in Kueue's ordering of a cycle's heads: higher
    priority first, then older; a queue with nothing waiting last."""
    cq = model.cqs.get(name)
    head = model.head(cq) if cq is not None else None
    if head is None:
        return (1, (), name)
    return (0, head[0], name)


def _schedule_fair(model, names: list[str]) -> int:
    """The borrowing pass under fair sharing, one workload at a time per cohort tree: the
    ClusterQueue whose head wins the tree's tournament goes next (see _tournament)."""
    admitted = 0
    trees: dict[str, dict] = defaultdict(dict)
    for name in names:
        cq = model.cqs.get(name)
        if cq is None:
            continue
        if cq.parent is not None and not cq.parent.cycle:
            trees[cq.parent.root.name][name] = cq
        else:
            admitted += model.strategy.schedule_cq(cq, True)
    for root, left in trees.items():
        rounds = 4 * len(model.workloads) + 16  # preemptions cannot ping-pong for ever
        while left and rounds:
            rounds -= 1
            cq = _tournament(model, model.cohorts[root], left)
            if cq is None:
                break
            if model.strategy.schedule_cq(cq, True, limit=1) == 0:
                del left[cq.name]
            else:
                admitted += 1
    return admitted


def _tournament(model, root: cohorts.Cohort, left: dict):
    """Kueue's fair-sharing tournament over a cohort tree: each ClusterQueue's head is given
    its queue's share, and each Cohort's on the way up, as if it were admitted; at each Cohort,
    from the winners of its child Cohorts and the heads of its ClusterQueues, one that borrows
    nothing it asks for goes first, then the lowest share of the child it comes through, then
    the higher priority, then the older."""
    entries = {}
    for name, cq in list(left.items()):
        head = model.head(cq)
        if head is None:
            del left[name]
            continue
        request = flavorassigner.request_on_flavor(model, model.workloads[head[1]], cq)
        model.charge(cq, request, +1)
        try:
            shares, node, current = {}, cq.parent, cohorts.share(cq)
            while node is not None:
                shares[node.name] = current
                current = cohorts.share(node)
                node = node.parent
        finally:
            model.charge(cq, request, -1)
        entries[name] = (shares, request, head[0])

    def better(a: str, b: str, at: str) -> bool:
        (sa, ra, oa), (sb, rb, ob) = entries[a], entries[b]
        da, db = sa[at], sb[at]
        borrows_a, borrows_b = da.borrows_on(ra), db.borrows_on(rb)
        if borrows_a != borrows_b:
            return not borrows_a
        if da.key != db.key:
            return da.key < db.key
        return oa < ob

    def play(cohort: cohorts.Cohort) -> str | None:
        candidates = [w for child in cohort.child_cohorts if (w := play(child)) is not None]
        candidates += [cq.name for cq in cohort.child_cqs if cq.name in entries]
        best = None
        for name in candidates:
            if best is None or better(name, best, cohort.name):
                best = name
        return best

    winner = play(root)
    return model.cqs[winner] if winner is not None else None
