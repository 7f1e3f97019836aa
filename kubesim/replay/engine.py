"""The Kueue engine as the replay runs it (kubesim.replay): no store, no statuses, and its
pending workloads in buckets of workloads alike, so that a scheduling pass costs what the kinds
of workloads waiting cost, not their number."""

from __future__ import annotations

import bisect
import heapq
from collections import defaultdict
from dataclasses import dataclass, field

from kubesim import cohorts
from kubesim.afs import AfsConfig
from kubesim.kueue import WL, KueueEngine
from kubesim.store import Store


class ReplayClock:
    """The simulated clock: seconds `t` from `origin` (a UNIX time)."""

    def __init__(self, origin: float):
        self.origin = origin
        self.t = 0.0

    def timestamp(self) -> float:
        return self.origin + self.t


@dataclass
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
    # Unparked by a release elsewhere: they fail as they did (see _unpark).
    hopeless: bool = False
    untried: bool = False  # one was parked without a try (evicted in the same round)

    def head(self) -> tuple | None:
        return self.items[self.cut] if self.cut < len(self.items) else None


class ReplayEngine(KueueEngine):
    """The engine without its store side effects; admissions and evictions are reported.

    With `shortcut` (no pending messages to write), a ClusterQueue's pending workloads are
    kept in buckets of workloads alike, and a scheduling pass tries each bucket's first
    workload rather than every workload: when one fails to be admitted (even by preemption),
    so does every workload alike or larger and of no higher priority (`_dominated`) until usage
    changes, and the pass passes them over as a block. The result is the same as trying each
    workload in turn (tested), in time that grows with the kinds of workloads waiting, not with
    their number."""

    def __init__(
        self, clock: ReplayClock, fair_sharing: bool = False, shortcut: bool = True,
        admission_fair_sharing: AfsConfig | None = None,
    ):  # fmt: skip
        super().__init__(
            Store(system_namespaces=False), clock=clock, fair_sharing=fair_sharing,
            admission_fair_sharing=admission_fair_sharing or False,
        )  # fmt: skip
        self.on_admit = self.on_evict = None
        self.shortcut = shortcut
        self.buckets: dict[str, dict[tuple, Bucket]] = defaultdict(dict)
        self.classes: dict[tuple[str, str], tuple] = {}  # workload -> (bucket, shape, total)
        self.shapes: dict[tuple, int] = {}  # pod set (name, template, resources) -> shape
        self.plans: dict[tuple, list | None] = {}  # (ClusterQueue, bucket) -> see assign()
        self.version = 0  # of usage: bumped by every admission and release
        # Per (ClusterQueue, shape), since usage last changed: (priority, total) of workloads
        # that could not be admitted even by preemption, and (None, total) of those no flavor
        # could take without preemption. A workload that fair-sharing strategies refused is
        # not among them: which victims they weigh, in what order, depends on its size.
        self.failed: dict[tuple[str, int], list[tuple]] = defaultdict(list)
        self.unfit: dict[tuple[str, int], list[tuple]] = defaultdict(list)
        self.stopped: set[tuple[str, str]] = set()  # LocalQueues with a stopPolicy

    def _write_status(self, wl, mutate) -> None:  # no Workload objects: nothing to write
        return

    def _now(self) -> str:  # for the statuses and events, which a replay does not write
        return ""

    def _event(self, *args, **kwargs) -> None:
        return

    def _start_job(self, wl) -> None:
        return

    def _stop_job(self, wl) -> None:
        return

    def _admit(self, wl, cq, assignment) -> None:
        super()._admit(wl, cq, assignment)
        self.on_admit(wl)

    def _evict(self, wl, reason, message, **kwargs) -> None:
        super()._evict(wl, reason, message, **kwargs)
        self.on_evict(wl)

    # -- the buckets (with the shortcut; without it, the engine's own sorted lists) ---------------

    def _usage_changed(self) -> None:
        self.version += 1
        self.failed.clear()
        self.unfit.clear()

    def rebuild(self) -> None:
        self.buckets.clear()
        self.plans.clear()
        self.stopped = {key for key, lq in self.lqs.items()
                        if (lq.get("spec") or {}).get("stopPolicy", "None") != "None"}  # fmt: skip
        super().rebuild()

    def assign(self, wl: WL, cq) -> tuple[list[dict[str, str]] | None, bool, str]:
        """The engine's assign() for a workload of one pod set whose resources one resource
        group covers (every workload of a replay): the same flavor and borrowing, without the
        pending message (a replay writes none)."""
        if not self.shortcut:
            return super().assign(wl, cq)
        ck = self._class(wl)[0]
        plan = self.plans.get((cq.name, ck), False)
        if plan is False:
            plan = self.plans[(cq.name, ck)] = self._plan(wl, cq)
        if plan is None:
            return super().assign(wl, cq)
        usage = cq.usage
        parent = cq.parent
        # A queue of a cohort without a parent (every queue the portal makes) has the
        # arithmetic of kubesim.cohorts worked out here; a deeper tree's goes through it.
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

    def _plan(self, wl: WL, cq) -> list | None:
        """The flavors assign() tries for the workload's bucket in the ClusterQueue, in order,
        with the quota it checks in each: [(flavor, [((flavor, resource), units, quota)])];
        None for a workload the engine's own assign() must look at (several pod sets or
        resource groups, a topology request, a resource no group covers)."""
        if len(wl.podsets) != 1 or wl.podsets[0].topology:
            return None
        ps = wl.podsets[0]
        total = ps.total()
        groups = {cq.group_of.get(res) for res in total}
        if len(groups) != 1 or None in groups:
            return None
        plan = []
        for flavor, fres in cq.groups[groups.pop()][1]:
            if self._mismatch(flavor, ps) or any(res not in fres for res in total):
                continue
            plan.append(
                (flavor, [((flavor, res), units, fres[res]) for res, units in total.items()])
            )
        return plan

    def _class(self, wl: WL) -> tuple:
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

    def _enqueue(self, wl: WL) -> None:
        if not self.shortcut:
            super()._enqueue(wl)
            return
        cq, _ = self._target(wl)
        wl.parked = False
        if cq is None:
            wl.cq = None
            self.unqueued.add(wl.key)
            return
        wl.cq = cq.name
        ck, shape, total = self._class(wl)
        bucket = self.buckets[cq.name].get(ck)
        if bucket is None:
            flavors = None
            if shape is not None:
                flavors = {f for f in cq.flavor_names if not self._mismatch(f, wl.podsets[0])}
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
        self.dirty_cqs.add(cq.name)

    def _dequeue(self, wl: WL) -> None:
        if not self.shortcut:
            super()._dequeue(wl)
            return
        self.unqueued.discard(wl.key)
        buckets = self.buckets.get(wl.cq or "")
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
        wl.parked = False

    def _unpark(self, cq_names, flavors: set[str] | None = None) -> None:
        """Every parked workload of the cohort is tried again, as Kueue does. Without fair
        sharing, though, quota released in some flavors changes nothing for workloads that
        cannot go there (their quota, the victims that could make room for them and the
        cohort's lendable quota are all in their own flavors): they are known to fail again
        (hopeless), and the pass parks them without trying; they still count as waiting, so
        the queues' heads, which order the pass, stay as Kueue has them. With fair sharing,
        the release lowers shares, which decide preemption in every flavor."""
        if not self.shortcut:
            super()._unpark(cq_names, flavors)
            return
        if self.fair_sharing:
            flavors = None
        for name in cq_names:
            buckets = self.buckets.get(name)
            if not buckets:
                continue
            for bucket in buckets.values():
                relevant = (flavors is None or bucket.flavors is None or bucket.untried
                            or flavors & bucket.flavors)  # fmt: skip
                if bucket.cut:
                    bucket.cut = 0
                    bucket.hopeless = not relevant
                elif relevant:
                    bucket.hopeless = False
                bucket.untried = False
            self.dirty_cqs.add(name)

    def _head(self, cq) -> tuple | None:
        if not self.shortcut:
            return super()._head(cq)
        fair = self._afs_on(cq)
        buckets = self.buckets.get(cq.name, {}).values()
        heads = [self._heap_key(b, b.items[b.cut], fair) for b in buckets if b.cut < len(b.items)]
        if not heads:
            return None
        return min(heads)[1] if fair else min(heads)

    def _heap_key(self, bucket: Bucket, entry: tuple, fair: bool) -> tuple:
        """Where a bucket's workload stands in its ClusterQueue's order: its queue entry, under
        admission fair sharing after its LocalQueue's usage."""
        return (self.lq_usage(bucket.queue), entry) if fair else entry

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

    def _schedule_cq(self, cq, allow_borrow: bool, limit: int = 0) -> int:
        """The engine's pass over one ClusterQueue, bucket by bucket in queue order (a heap of
        the buckets' first workloads)."""
        if not self.shortcut:
            return super()._schedule_cq(cq, allow_borrow, limit)
        buckets = self.buckets.get(cq.name)
        if not buckets or not cq.is_active:
            return 0
        strict = cq.strategy == "StrictFIFO"
        stopped, failed, unfit = self.stopped, self.failed, self.unfit

        fair = self._afs_on(cq)

        def waiting() -> list:
            """The heap of the buckets to try: a StrictFIFO queue stops at a hopeless head,
            any other passes hopeless buckets over (parked when the pass ends)."""
            heap = [(self._heap_key(b, b.items[b.cut], fair), ck) for ck, b in buckets.items()
                    if b.cut < len(b.items) and (strict or not b.hopeless)]  # fmt: skip
            heapq.heapify(heap)
            return heap

        admitted = 0
        heap = waiting()
        # Buckets passed over in this pass because a failure dominates them: what stands in
        # the queue before the next admission is parked with it, what stands after is tried
        # again (the admission changed usage, so the failure no longer holds).
        passed: list[tuple] = []

        def park_passed(at: tuple) -> list[tuple]:
            """Before an admission at `at` (its place): park what of the passed buckets stands
            before it; the buckets with workloads after it, to try again once it is in."""
            again = []
            for ck in passed:
                bucket = buckets.get(ck)
                if bucket is None:
                    continue
                if not fair:
                    bucket.cut = bisect.bisect_left(bucket.items, at)
                elif self.lq_usage(bucket.queue) < at[0]:
                    bucket.cut = len(bucket.items)  # its LocalQueue comes first: all passed by
                else:  # the same usage: then by place (a higher one cannot have been passed)
                    bucket.cut = bisect.bisect_left(bucket.items, at[1])
                if bucket.cut < len(bucket.items):
                    again.append(ck)
            passed.clear()
            return again

        while heap:
            at, ck = heap[0]
            entry = at[1] if fair else at
            bucket = buckets[ck]
            if stopped and bucket.queue in stopped:
                heapq.heappop(heap)  # its whole bucket waits in the stopped LocalQueue
                continue
            if bucket.hopeless:  # StrictFIFO only
                return admitted
            wl = self.workloads[entry[1]]
            fkey = (cq.name, bucket.shape)
            if (allow_borrow and not strict and bucket.shape is not None and fkey in failed
                    and self._dominated(bucket, failed[fkey])):  # fmt: skip
                heapq.heappop(heap)
                passed.append(ck)
                continue
            if bucket.tried is not None and bucket.tried[0] == self.version:
                _, assignment, borrows = bucket.tried
            elif (
                bucket.shape is not None and fkey in unfit and self._dominated(bucket, unfit[fkey])
            ):
                assignment, borrows = None, False  # no flavor can take it without preemption
            else:
                assignment, borrows, _ = self.assign(wl, cq)
                bucket.tried = (self.version, assignment, borrows)
                if assignment is None:
                    unfit[fkey].append((None, bucket.size))
            if assignment is not None and borrows and not allow_borrow:
                if strict:
                    return admitted
                heapq.heappop(heap)  # its bucket would borrow as well: the next pass
                continue
            victims = []
            if assignment is None and allow_borrow and wl.key not in self.evicted_now:
                victims, assignment = self._find_victims(wl, cq)
            if assignment is not None:
                again = [] if victims else park_passed(at)
                del bucket.items[bucket.cut]
                if not bucket.items:
                    del buckets[ck]
                if victims:
                    self._preempt(wl, cq, victims)
                self._admit(wl, cq, assignment)
                admitted += 1
                if victims:
                    # The victims' release unparked the cohort and they queue again: start over.
                    passed.clear()
                    heap = waiting()
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
            if wl.key in self.evicted_now:
                # Evicted in this round, it does not preempt: it alone is parked.
                bucket.cut += 1
                bucket.untried = True
                if bucket.cut < len(bucket.items):
                    heapq.heappush(
                        heap, (self._heap_key(bucket, bucket.items[bucket.cut], fair), ck)
                    )
                continue
            if not self.refused:
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
