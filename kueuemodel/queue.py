"""Ordering: each ClusterQueue's pending workloads in the order Kueue tries them (priority, then
age; under admission fair sharing their LocalQueue's usage first), and a pass over one queue as
its queueing strategy says: BestEffortFIFO sets a workload that does not fit aside ("parks"
it, Kueue's inadmissible workloads) until quota is released in its cohort, and lets later ones
go; StrictFIFO stops at a head that does not fit.

How the pending workloads are kept and a pass goes through them is the model's strategy.
OneByOne, here, keeps a sorted list per ClusterQueue and tries every workload in turn; the
replay's Buckets (kueuemodel.replay.buckets) keeps workloads alike together and tries one for
all. A strategy answers:

- reset(): the configuration was rebuilt, nothing is queued;
- usage_changed(): an admission or a release is about to change usage;
- push(wl, cq) / remove(wl, cq): wl queues in cq, or leaves it;
- requeue(cq_names, flavors): quota was released (in `flavors`, where known): what was set aside
  in those queues is tried again;
- head(cq): (sort key, workload key) of the first workload the queue would try, or None;
- pending(cq): the keys of its pending workloads (any order);
- schedule_cq(cq, allow_borrow, limit): one pass; the number admitted;
- plan(wl, cq): the flavors wl may take in cq with the quota each check reads, when the
  strategy knows them in advance (kueuemodel.flavorassigner.plan_for), else None.
"""

from __future__ import annotations

import bisect


class OneByOne:
    """Every pending workload tried in turn, in a sorted list per ClusterQueue."""

    def __init__(self, model):
        self.model = model

    def reset(self) -> None:
        return

    def usage_changed(self) -> None:
        return

    def plan(self, wl, cq) -> None:
        return None

    def push(self, wl, cq) -> None:
        bisect.insort(cq.active, (wl.sort_key(), wl.key))
        self.model.dirty_cqs.add(cq.name)
        self.model.status_cqs.add(cq.name)

    def remove(self, wl, cq) -> None:
        if wl.parked:
            cq.parked.discard(wl.key)
        else:
            entry = (wl.sort_key(), wl.key)
            i = bisect.bisect_left(cq.active, entry)
            if i < len(cq.active) and cq.active[i] == entry:
                del cq.active[i]
        self.model.status_cqs.add(cq.name)

    def requeue(self, cq_names, flavors: set[str] | None = None) -> None:
        """Every parked workload of those queues is tried again (whatever the flavors)."""
        model = self.model
        for name in cq_names:
            cq = model.cqs.get(name)
            if cq is None:
                continue
            if cq.active:
                # A StrictFIFO head never parks: it is simply tried again.
                model.dirty_cqs.add(name)
            if not cq.parked:
                continue
            for key in cq.parked:
                wl = model.workloads[key]
                wl.parked = False
                bisect.insort(cq.active, (wl.sort_key(), key))
            cq.parked.clear()
            model.dirty_cqs.add(name)

    def head(self, cq) -> tuple | None:
        if not cq.active:
            return None
        if self.model.afs_on(cq):
            return min(cq.active, key=self.model.afs_order)
        return cq.active[0]

    def pending(self, cq) -> list[tuple[str, str]]:
        return [key for _, key in cq.active] + list(cq.parked)

    def schedule_cq(self, cq, allow_borrow: bool, limit: int = 0) -> int:
        """One pass over the queue, each workload in turn: admitted when it fits (in the pass
        that may borrow, by preemption too), else left for the borrowing pass, and in that
        pass parked (BestEffortFIFO) or the end of the pass (StrictFIFO)."""
        model = self.model
        if not cq.active:
            return 0
        if not cq.is_active:
            # Kueue gives one message for a stopped ClusterQueue and one missing a flavor.
            why = f"ClusterQueue {cq.name} is inactive"
            for _, key in cq.active:
                model.set_pending_message(model.workloads[key], why)
            return 0
        admitted = 0
        strict = cq.strategy == "StrictFIFO"
        # The order tried: the queue itself, or under admission fair sharing a copy in its
        # LocalQueues' usage order (taken again after each admission, which raises a usage).
        fair = model.afs_on(cq)
        view = sorted(cq.active, key=model.afs_order) if fair else cq.active

        def take(index: int) -> None:
            entry = view.pop(index)
            if fair:
                cq.active.remove(entry)

        i = 0
        while i < len(view):
            _, key = view[i]
            wl = model.workloads[key]
            lq = model.lqs.get((wl.ns, wl.queue))
            lq_stop = ((lq or {}).get("spec") or {}).get("stopPolicy") or "None"
            if lq_stop != "None":
                model.set_pending_message(wl, f"LocalQueue {wl.queue} is inactive")
                i += 1
                continue
            assignment, borrows, message = model.assign(wl, cq)
            if assignment is not None:
                if borrows and not allow_borrow:
                    if strict:
                        return admitted
                    i += 1
                    continue
                take(i)
                model.admit(wl, cq, assignment)
                admitted += 1
                if limit and admitted >= limit:
                    return admitted
                if fair:
                    view[i:] = sorted(view[i:], key=model.afs_order)
                continue
            victims, assignment = model.find_victims(wl, cq) if allow_borrow else ([], None)
            if victims:
                take(i)
                model.preempt(wl, cq, victims)
                model.admit(wl, cq, assignment)
                admitted += 1
                if limit and admitted >= limit:
                    return admitted
                i = 0  # evicted workloads re-entered the queue
                if fair:
                    view = sorted(cq.active, key=model.afs_order)
                continue
            if not allow_borrow:
                # It may still fit once borrowing is allowed in the second pass.
                if strict:
                    model.set_pending_message(wl, message)
                    return admitted
                i += 1
                continue
            model.set_pending_message(wl, message)
            if strict:
                return admitted
            take(i)
            wl.parked = True
            cq.parked.add(key)
        return admitted
