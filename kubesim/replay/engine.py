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
        self.wl_plans: dict[tuple, list | None] = {}  # (ClusterQueue, workload) -> the same
        self.others: dict[str, list] = {}  # ClusterQueue -> see _cohort_others()
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
        self.wl_plans.clear()
        self.others.clear()
        self.stopped = {key for key, lq in self.lqs.items()
                        if (lq.get("spec") or {}).get("stopPolicy", "None") != "None"}  # fmt: skip
        super().rebuild()

    def assign(self, wl: WL, cq) -> tuple[list[dict[str, str]] | None, bool, str]:
        """The engine's assign() for a workload of one pod set whose resources one resource
        group covers (every workload of a replay): the same flavor and borrowing, without the
        pending message (a replay writes none)."""
        plan = self._plan_of(wl, cq) if self.shortcut else None
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

    # -- the victim search's checks worked out, for a queue of a cohort without a parent -----------
    #
    # The search takes candidates' usage off and puts it back, asking assign() each time. For a
    # workload it has a plan for (see _plan) in a queue of a cohort without a parent (or of
    # none), whose candidates holding quota the plan reads are in that cohort's own queues,
    # what their eviction gives back is worked out here as _charge() would take it off: what
    # else they hold moves no usage the plan reads, in their queue or up the tree.

    def _victim_plan(self, wl: WL, cq, candidates: list[WL]) -> list | None:
        """The plan to work the search's checks out with, or None (the engine's way)."""
        plan = self._plan_of(wl, cq) if self.shortcut else None
        parent = cq.parent
        if plan is None or (parent is not None and parent.parent is not None):
            return None
        for cand in candidates:
            if cand.cq != cq.name and (parent is None or self.cqs[cand.cq].parent is not parent):
                for _, checks in plan:
                    if any(cand.usage.get(fr) for fr, _, _ in checks):
                        return None
        return plan

    @staticmethod
    def _give_back(freed: dict, plan: list, cand: WL, sign: int) -> None:
        """Count (sign 1) or no longer count (-1) what cand holds of the plan's quota as freed,
        per ClusterQueue."""
        for _, checks in plan:
            for fr, _, _ in checks:
                units = cand.usage.get(fr)
                if units:
                    per_cq = freed.setdefault(cand.cq, {})
                    per_cq[fr] = per_cq.get(fr, 0) + sign * units

    def _fit(self, cq, plan: list, freed: dict) -> tuple[str | None, bool]:
        """assign() with `freed` taken off: (the flavor, borrows) or (None, False)."""
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
                            ocq = self.cqs[name]
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

    def _room_without(self, wl: WL, cq, candidates: list[WL]) -> bool:
        """The engine's check: would wl fit were every candidate evicted (the victim search
        asks this of most workloads that do not fit)."""
        plan = self._victim_plan(wl, cq, candidates)
        if plan is None:
            return super()._room_without(wl, cq, candidates)
        freed: dict[str, dict[tuple[str, str], int]] = {}
        for cand in candidates:
            self._give_back(freed, plan, cand, 1)
        return self._fit(cq, plan, freed)[0] is not None

    def _simulate(
        self, wl: WL, cq, candidates: list[WL], reclaiming: bool
    ) -> tuple[list[WL], list[dict[str, str]] | None]:
        """The engine's search: candidates evicted in order until wl fits (reclaiming other
        queues' quota only within its nominal quota), then those not needed put back, the
        latest first."""
        plan = self._victim_plan(wl, cq, candidates)
        if plan is None:
            return super()._simulate(wl, cq, candidates, reclaiming)
        freed: dict[str, dict[tuple[str, str], int]] = {}
        removed: list[WL] = []
        found = None
        for cand in candidates:
            self._give_back(freed, plan, cand, 1)
            removed.append(cand)
            flavor, borrows = self._fit(cq, plan, freed)
            if flavor is not None:
                wl.tas_plan = [None]  # as assign() leaves it
                if not (borrows and reclaiming and any(c.cq != cq.name for c in removed)):
                    found = flavor
                    break
        if found is None:
            return [], None
        for cand in reversed(removed[:-1]):
            self._give_back(freed, plan, cand, -1)
            flavor, borrows = self._fit(cq, plan, freed)
            if flavor is not None:
                wl.tas_plan = [None]
            if flavor is not None and not (
                borrows and reclaiming and any(c.cq != cq.name for c in removed if c is not cand)
            ):
                removed.remove(cand)
                found = flavor
            else:
                self._give_back(freed, plan, cand, 1)
        return list(removed), [dict.fromkeys(wl.podsets[0].per_pod, found)]

    def _reclaimable(self, wl: WL, cq) -> set[tuple[str, str]]:
        """The engine's _reclaimable() for a workload of one pod set in a queue of a cohort
        without a parent, with the arithmetic of kubesim.cohorts worked out (as in assign());
        a deeper tree's goes through the engine's."""
        parent = cq.parent
        if not self.shortcut or parent is None or parent.parent is not None:
            return super()._reclaimable(wl, cq)
        total = self._class(wl)[2]
        if not total:  # a workload of its own (see _class)
            return super()._reclaimable(wl, cq)
        out: set[tuple[str, str]] = set()
        others = None
        for res, units in total.items():
            gi = cq.group_of.get(res)
            if gi is None:
                continue
            for flavor, fres in cq.groups[gi][1]:
                q = fres.get(res)
                fr = (flavor, res)
                if q is None or cq.usage[fr] + units > q.nominal:
                    continue
                used = cq.usage[fr]
                avail = max(0, q.guaranteed - used) + parent.subtree.get(fr, 0) - parent.usage[fr]
                if q.borrowing is not None:
                    avail = min(avail, q.nominal + q.borrowing - used)
                shortfall = units - max(0, avail)
                if others is None:
                    others = self._cohort_others(cq)
                borrowed = 0
                for ocq in others:
                    oq = ocq.quotas.get(fr)
                    if oq is not None:
                        borrowed += max(0, ocq.usage[fr] - oq.nominal)
                if borrowed >= shortfall:
                    out.add(fr)
        return out

    def _cohort_others(self, cq) -> list:
        """The other ClusterQueues of the queue's cohort tree, in the engine's order."""
        found = self.others.get(cq.name)
        if found is None:
            found = self.others[cq.name] = [self.cqs[n] for n in self._cohort_of(cq)
                                            if n != cq.name]  # fmt: skip
        return found

    def _plan_of(self, wl: WL, cq) -> list | None:
        """The workload's bucket's plan in the ClusterQueue (see _plan), worked out once per
        bucket and then found by the workload's key (a bucket's key is slower to hash)."""
        key = (cq.name, wl.key)
        plan = self.wl_plans.get(key, False)
        if plan is False:
            ck = (cq.name, self._class(wl)[0])
            plan = self.plans.get(ck, False)
            if plan is False:
                plan = self.plans[ck] = self._plan(wl, cq)
            self.wl_plans[key] = plan
        return plan

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
            self.dirty_cqs.add(name)

    def _head(self, cq) -> tuple | None:
        if not self.shortcut:
            return super()._head(cq)
        buckets = self.buckets.get(cq.name, {}).values()
        if not self._afs_on(cq):  # the key is the queue entry itself (see _heap_key)
            return min([b.items[b.cut] for b in buckets if b.cut < len(b.items)], default=None)
        heads = [self._heap_key(b, b.items[b.cut], True) for b in buckets if b.cut < len(b.items)]
        return min(heads)[1] if heads else None

    def _heap_key(self, bucket: Bucket, entry: tuple, fair: bool) -> tuple:
        """Where a bucket's workload stands in its ClusterQueue's order: its queue entry, under
        admission fair sharing after its LocalQueue's usage."""
        return (self.lq_usage(bucket.queue), entry) if fair else entry

    @staticmethod
    def _would_borrow(cq, plan: list | None) -> bool:
        """Whether a workload of a bucket with this plan (see _plan; None: not known) asks for
        more than the queue's nominal quota left in some resource of every flavor it tries:
        then it borrows wherever it fits. A pass that may not borrow passes it by, and its
        admissions only add usage, so it would all along; what that pass's tries leave behind
        (the bucket's `tried`, unfit sizes) are facts of the current usage that the next pass
        finds out again."""
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
            elif self.lq_usage(bucket.queue) < at[0]:
                bucket.cut = len(bucket.items)  # its LocalQueue comes first: all passed by
            else:  # the same usage: then by place (a higher one cannot have been passed)
                bucket.cut = bisect.bisect_left(bucket.items, at[1])
            if bucket.cut < len(bucket.items):
                again.append(ck)
        passed.clear()
        return again

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
        name, workloads, evicted = cq.name, self.workloads, self.evicted_now
        passes_failed = allow_borrow and not strict  # a failure dominates what it passes by

        fair = self._afs_on(cq)
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
            if assignment is None and allow_borrow and wl.key not in evicted:
                victims, assignment = self._find_victims(wl, cq)
            if assignment is not None:
                again = [] if victims else self._park_passed(buckets, passed, at, fair)
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
