"""The replay's strategy for the model (kueuemodel.queue): a ClusterQueue's pending workloads in
buckets of workloads alike, so that a scheduling pass costs what the kinds of workloads waiting
cost, not their number.

A scheduling pass tries each bucket's first workload rather than every workload: when one fails
to be admitted (even by preemption), so does every workload alike or larger and of no higher
priority (`_dominated`) until usage changes, and the pass passes them over as a block. Each
bucket's plan (kueuemodel.flavorassigner.plan_for) lets flavor assignment and the victim search
read the usage counters directly. No pending messages are written. The result is the same as
trying each workload in turn (tested), in time that grows with the kinds of workloads waiting,
not with their number."""

from __future__ import annotations

import bisect
import heapq
from collections import defaultdict
from dataclasses import dataclass, field

from kueuemodel import flavorassigner


@dataclass(slots=True)
class Bucket:
    """Pending workloads of one ClusterQueue that Kueue's rules tell apart only by their place
    in the queue (same LocalQueue, pod set shape, size and priority), in queue order; the
    first `cut` are parked (set aside until quota is released in the cohort)."""

    shape: int | None  # None: a workload of its own, never dominated (see _class)
    total: dict[str, int]
    size: int | tuple  # total's units by resource name (one resource: the number)
    priority: int
    flavors: set[str] | None  # the flavors its pod set may go to (None: any)
    queue: tuple[str, str]  # its LocalQueue (namespace, name)
    items: list = field(default_factory=list)  # (sort key, workload key), sorted
    cut: int = 0
    # (usage version, assignment, borrows): what assign() answered for any of them, which
    # holds until usage changes.
    tried: tuple | None = None
    # Unparked by a release elsewhere: they fail as they did (see requeue).
    hopeless: bool = False
    untried: bool = False  # one was parked without a try (evicted in the same round)

    def head(self) -> tuple | None:
        return self.items[self.cut] if self.cut < len(self.items) else None


class Buckets:
    """Pending workloads in buckets of workloads alike, one try for all (see the module)."""

    def __init__(self, model):
        self.model = model
        self.buckets: dict[str, dict[tuple, Bucket]] = defaultdict(dict)
        self.classes: dict[tuple[str, str], tuple] = {}  # workload -> (bucket, shape, total)
        self.shapes: dict[tuple, int] = {}  # pod set (name, template, resources) -> shape
        self.plans: dict[tuple, list | None] = {}  # (ClusterQueue, bucket) -> see plan()
        self.wl_plans: dict[tuple, list | None] = {}  # (ClusterQueue, workload) -> the same
        self.version = 0  # of usage: bumped by every admission and release
        # Per (ClusterQueue, shape), since usage last changed: (priority, total) of workloads
        # that could not be admitted even by preemption, and (None, total) of those no flavor
        # could take without preemption. A workload that fair-sharing strategies refused is
        # not among them: which victims they weigh, in what order, depends on its size.
        self.failed: dict[tuple[str, int], list[tuple]] = defaultdict(list)
        self.unfit: dict[tuple[str, int], list[tuple]] = defaultdict(list)
        self.stopped: set[tuple[str, str]] = set()  # LocalQueues with a stopPolicy

    def reset(self) -> None:
        self.buckets.clear()
        self.plans.clear()
        self.wl_plans.clear()
        self.stopped = {key for key, lq in self.model.lqs.items()
                        if (lq.get("spec") or {}).get("stopPolicy", "None") != "None"}  # fmt: skip
        self.usage_changed()

    def usage_changed(self) -> None:
        self.version += 1
        self.failed.clear()
        self.unfit.clear()

    # -- plans and classes ------------------------------------------------------------------

    def plan(self, wl, cq) -> list | None:
        """The workload's bucket's plan in the ClusterQueue, worked out once per bucket and
        then found by the workload's key (a bucket's key is slower to hash)."""
        key = (cq.name, wl.key)
        plan = self.wl_plans.get(key, False)
        if plan is False:
            ck = (cq.name, self._class(wl)[0])
            plan = self.plans.get(ck, False)
            if plan is False:
                plan = self.plans[ck] = flavorassigner.plan_for(self.model, wl, cq)
            self.wl_plans[key] = plan
        return plan

    def _class(self, wl) -> tuple:
        """(bucket, shape, total): a workload with one pod set and no topology request is alike
        others of its LocalQueue, pod set (name, template, resources), total and priority; any
        other is a bucket of its own and never dominated (shape None)."""
        found = self.classes.get(wl.key)
        if found is None:
            if len(wl.podsets) != 1 or wl.podsets[0].topology:
                found = (("own", wl.key), None, {})
            else:
                ps = wl.podsets[0]
                shape = (ps.name, repr(ps.spec), tuple(sorted(ps.per_pod)))
                shape = self.shapes.setdefault(shape, len(self.shapes))
                total = ps.total()
                found = ((wl.queue, shape, tuple(sorted(total.items())), wl.priority), shape, total)
            self.classes[wl.key] = found
        return found

    # -- the queues -------------------------------------------------------------------------

    def push(self, wl, cq) -> None:
        ck, shape, total = self._class(wl)
        bucket = self.buckets[cq.name].get(ck)
        if bucket is None:
            flavors = None
            if shape is not None:
                ps = wl.podsets[0]
                flavors = {f for f in cq.flavor_names
                           if not flavorassigner.mismatch(self.model, f, ps)}  # fmt: skip
            size = tuple(units for _, units in sorted(total.items()))
            bucket = self.buckets[cq.name][ck] = Bucket(
                shape, total, size[0] if len(size) == 1 else size, wl.priority, flavors,
                (wl.ns, wl.queue),
            )  # fmt: skip
        i = bisect.bisect_left(bucket.items, (wl.sort_key(), wl.key))
        bucket.items.insert(i, (wl.sort_key(), wl.key))
        # A new workload waits behind its bucket, and an evicted one comes back after its
        # cohort was unparked, so none lands among parked ones; if one did, those behind it
        # are tried again with it rather than passed over.
        bucket.cut = min(bucket.cut, i)
        self.model.dirty_cqs.add(cq.name)

    def remove(self, wl, cq) -> None:
        buckets = self.buckets.get(cq.name)
        ck = self._class(wl)[0]
        bucket = buckets.get(ck) if buckets is not None else None
        if bucket is not None:
            i = bisect.bisect_left(bucket.items, (wl.sort_key(), wl.key))
            if i < len(bucket.items) and bucket.items[i][1] == wl.key:
                del bucket.items[i]
                if i < bucket.cut:
                    bucket.cut -= 1
                if not bucket.items:
                    del buckets[ck]

    def requeue(self, cq_names, flavors: set[str] | None = None) -> None:
        """Every parked workload of the cohort is tried again, as Kueue does. Without fair
        sharing, though, quota released in some flavors changes nothing for workloads that
        cannot go there (their quota, the victims that could make room for them and the
        cohort's lendable quota are all in their own flavors): they are known to fail again
        (hopeless), and the pass parks them without trying; they still count as waiting, so
        the queues' heads, which order the pass, stay as Kueue has them. With fair sharing,
        the release lowers shares, which decide preemption in every flavor."""
        if self.model.fair_sharing:
            flavors = None
        for name in cq_names:
            buckets = self.buckets.get(name)
            if not buckets:
                continue
            if flavors is None:
                for bucket in buckets.values():
                    bucket.cut = 0
                    bucket.hopeless = bucket.untried = False
            else:
                for bucket in buckets.values():
                    # Whether the release is relevant matters only to a bucket it unparks or
                    # one found hopeless before.
                    if bucket.cut or bucket.hopeless:
                        relevant = (bucket.flavors is None or bucket.untried
                                    or not flavors.isdisjoint(bucket.flavors))  # fmt: skip
                        if bucket.cut:
                            bucket.cut = 0
                            bucket.hopeless = not relevant
                        elif relevant:
                            bucket.hopeless = False
                    bucket.untried = False
            self.model.dirty_cqs.add(name)

    def head(self, cq) -> tuple | None:
        buckets = self.buckets.get(cq.name, {}).values()
        if not self.model.afs_on(cq):  # the key is the queue entry itself (see _heap_key)
            return min([b.items[b.cut] for b in buckets if b.cut < len(b.items)], default=None)
        heads = [self._heap_key(b, b.items[b.cut], True) for b in buckets if b.cut < len(b.items)]
        return min(heads)[1] if heads else None

    def pending(self, cq) -> list[tuple[str, str]]:
        return [key for b in self.buckets.get(cq.name, {}).values() for _, key in b.items]

    def _heap_key(self, bucket: Bucket, entry: tuple, fair: bool) -> tuple:
        """Where a bucket's workload stands in its ClusterQueue's order: its queue entry, under
        admission fair sharing after its LocalQueue's usage."""
        return (self.model.lq_usage(bucket.queue), entry) if fair else entry

    # -- the pass ---------------------------------------------------------------------------

    @staticmethod
    def _would_borrow(cq, plan: list | None) -> bool:
        """Whether a workload of a bucket with this plan (None: not known) asks for more than
        the queue's nominal quota left in some resource of every flavor it tries: then it
        borrows wherever it fits. A pass that may not borrow passes it by, and its admissions
        only add usage, so it would all along; what that pass's tries leave behind (the
        bucket's `tried`, unfit sizes) are facts of the current usage that the next pass finds
        out again."""
        if not plan:
            return False
        usage = cq.usage
        for _, checks in plan:
            for fr, units, q in checks:
                if usage[fr] + units > q.nominal:
                    break
            else:
                return False
        return True

    @staticmethod
    def _dominated(bucket: Bucket, failures: list | None) -> bool:
        """Whether one of `failures` (of the bucket's ClusterQueue and shape) has no lower a
        priority (any, for unfit) and asks for no more of any resource: then its workloads
        cannot be admitted either. Every admission rule is monotone in this: more GPUs never
        fit where fewer did not, a lower priority finds no victims a higher one did not."""
        if not failures:
            return False
        size, priority = bucket.size, bucket.priority
        for f_priority, f_size in failures:
            if f_priority is not None and f_priority < priority:
                continue
            if type(size) is int:
                if size >= f_size:
                    return True
            elif all(mine >= theirs for mine, theirs in zip(size, f_size, strict=True)):
                return True
        return False

    def _waiting(self, cq, buckets: dict, allow_borrow: bool, strict: bool, fair: bool) -> list:
        """The heap of a pass's buckets to try: a StrictFIFO queue stops at a hopeless head,
        any other passes hopeless buckets over (parked when the pass ends), and in a pass that
        may not borrow, the buckets that would borrow wherever they fit (see _would_borrow),
        which it would pass by one by one."""
        if fair:
            heap = [(self._heap_key(b, b.items[b.cut], fair), ck) for ck, b in buckets.items()
                    if b.cut < len(b.items) and (strict or not b.hopeless)]  # fmt: skip
        else:  # the key is the queue entry itself (see _heap_key)
            heap = [(b.items[b.cut], ck) for ck, b in buckets.items()
                    if b.cut < len(b.items) and (strict or not b.hopeless)]  # fmt: skip
        if not allow_borrow and not strict:
            plans = self.plans
            heap = [e for e in heap if not self._would_borrow(cq, plans.get((cq.name, e[1])))]
        heapq.heapify(heap)
        return heap

    def _park_passed(self, buckets: dict, passed: list, at: tuple, fair: bool) -> list[tuple]:
        """Before an admission at `at` (its place in the pass): park what of the passed
        buckets stands before it; returns the buckets with workloads after it, to try again
        once it is in."""
        again = []
        for ck in passed:
            bucket = buckets.get(ck)
            if bucket is None:
                continue
            if not fair:
                bucket.cut = bisect.bisect_left(bucket.items, at)
            elif self.model.lq_usage(bucket.queue) < at[0]:
                bucket.cut = len(bucket.items)  # its LocalQueue comes first: all passed by
            else:  # the same usage: then by place (a higher one cannot have been passed)
                bucket.cut = bisect.bisect_left(bucket.items, at[1])
            if bucket.cut < len(bucket.items):
                again.append(ck)
        passed.clear()
        return again

    def schedule_cq(self, cq, allow_borrow: bool, limit: int = 0) -> int:
        """The model's pass over one ClusterQueue, bucket by bucket in queue order (a heap of
        the buckets' first workloads)."""
        model = self.model
        buckets = self.buckets.get(cq.name)
        if not buckets or not cq.is_active:
            return 0
        strict = cq.strategy == "StrictFIFO"
        stopped, failed, unfit = self.stopped, self.failed, self.unfit
        name, workloads, evicted = cq.name, model.workloads, model.evicted_now
        passes_failed = allow_borrow and not strict  # a failure dominates what it passes by

        fair = model.afs_on(cq)
        heap = self._waiting(cq, buckets, allow_borrow, strict, fair)
        if not heap and not allow_borrow:
            return 0
        admitted = 0
        # Buckets passed over in this pass because a failure dominates them: what stands in
        # the queue before the next admission is parked with it, what stands after is tried
        # again (the admission changed usage, so the failure no longer holds).
        passed: list[tuple] = []

        while heap:
            at, ck = heap[0]
            entry = at[1] if fair else at
            bucket = buckets[ck]
            if stopped and bucket.queue in stopped:
                heapq.heappop(heap)  # its whole bucket waits in the stopped LocalQueue
                continue
            if bucket.hopeless:  # StrictFIFO only
                return admitted
            fkey = (name, bucket.shape)
            if (passes_failed and bucket.shape is not None and fkey in failed
                    and self._dominated(bucket, failed[fkey])):  # fmt: skip
                heapq.heappop(heap)
                passed.append(ck)
                continue
            wl = workloads[entry[1]]
            if bucket.tried is not None and bucket.tried[0] == self.version:
                _, assignment, borrows = bucket.tried
            elif (
                bucket.shape is not None and fkey in unfit and self._dominated(bucket, unfit[fkey])
            ):
                assignment, borrows = None, False  # no flavor can take it without preemption
            else:
                assignment, borrows, _ = model.assign(wl, cq)
                bucket.tried = (self.version, assignment, borrows)
                if assignment is None:
                    unfit[fkey].append((None, bucket.size))
            if assignment is not None and borrows and not allow_borrow:
                if strict:
                    return admitted
                heapq.heappop(heap)  # its bucket would borrow as well: the next pass
                continue
            victims = []
            if assignment is None and allow_borrow and wl.key not in evicted:
                victims, assignment = model.find_victims(wl, cq)
            if assignment is not None:
                again = [] if victims else self._park_passed(buckets, passed, at, fair)
                del bucket.items[bucket.cut]
                if not bucket.items:
                    del buckets[ck]
                if victims:
                    model.preempt(wl, cq, victims)
                model.admit(wl, cq, assignment)
                admitted += 1
                if victims:
                    # The victims' release unparked the cohort and they queue again: start over.
                    passed.clear()
                    heap = self._waiting(cq, buckets, allow_borrow, strict, fair)
                else:
                    head = bucket.head() if bucket.items else None
                    if head is not None:
                        heapq.heapreplace(heap, (self._heap_key(bucket, head, fair), ck))
                    else:
                        heapq.heappop(heap)
                    if fair:  # the admission raised its LocalQueue's usage: the order moves
                        heap = [(self._heap_key(buckets[k], key[1], fair), k) for key, k in heap]
                        heapq.heapify(heap)
                    for k in again:
                        b = buckets[k]
                        heapq.heappush(heap, (self._heap_key(b, b.items[b.cut], fair), k))
                if limit and admitted >= limit:
                    return admitted
                continue
            if strict:
                return admitted
            if not allow_borrow:
                heapq.heappop(heap)  # the next pass may let it borrow
                continue
            heapq.heappop(heap)
            if wl.key in evicted:
                # Evicted in this round, it does not preempt: it alone is parked. So is each
                # workload evicted in this round behind it in its bucket that the pass would
                # come to next: with usage and failures as they were, it fails as this one did
                # (its bucket's answer, or the same unfit failure), one by one, in a row.
                items, cut = bucket.items, bucket.cut + 1
                if fair and heap:
                    nxt = heap[0][0]
                    while (cut < len(items) and items[cut][1] in evicted
                           and self._heap_key(bucket, items[cut], fair) < nxt):  # fmt: skip
                        cut += 1
                else:  # up to the next bucket's first workload (keys are queue entries)
                    stop = bisect.bisect_left(items, heap[0][0], cut) if heap else len(items)
                    while cut < stop and items[cut][1] in evicted:
                        cut += 1
                bucket.cut = cut
                bucket.untried = True
                if cut < len(items):
                    heapq.heappush(heap, (self._heap_key(bucket, items[cut], fair), ck))
                continue
            if not model.refused:
                failed[fkey].append((bucket.priority, bucket.size))
            passed.append(ck)
        for ck in passed:  # the pass went by every one of them while the failure held
            bucket = buckets.get(ck)
            if bucket is not None:
                bucket.cut = len(bucket.items)
        if allow_borrow:
            for bucket in buckets.values():
                if bucket.hopeless:  # each would have failed as before
                    bucket.cut = len(bucket.items)
        return admitted
