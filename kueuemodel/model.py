"""The model: Kueue's view of one cluster (flavors, ClusterQueues, LocalQueues, cohort trees,
Workloads, what each queue uses) and the transitions the rules make (queue, admit, evict,
finish), kept incrementally so that one admission costs a few dict operations, not a scan of
every workload.

It does no I/O. A driver feeds it the cluster's objects (as Kubernetes dicts) and calls
schedule(); the model tells the driver what happened through a Listener (kubesim's Kueue
controller writes Workload statuses and events and starts or stops the jobs; the replay moves
its pods). How pending workloads are kept and a pass goes through them is a strategy the driver
chooses (kueuemodel.queue.OneByOne by default, kueuemodel.replay.buckets.Buckets for the
replay's speed)."""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from typing import Any

from kueuemodel import afs, cohorts, flavorassigner, preemption, scheduler, tas
from kueuemodel.queue import OneByOne
from kueuemodel.resources import parse_quantity
from kueuemodel.selectors import label_selector_matches
from kueuemodel.types import (
    ADMITTED,
    CQ,
    FINISHED,
    INACTIVE,
    PENDING,
    WL,
    condition,
    is_true,
    podsets_of,
)


class Listener:
    """What the model tells its driver, each right after the model changed (every method does
    nothing here)."""

    def admitted(self, wl: WL, cq: CQ) -> None:
        """wl was admitted to cq (wl.assignment, wl.usage and wl.tas are set)."""

    def evicted(
        self, wl: WL, reason: str, message: str, *, requeue: bool, preempted_reason: str | None
    ) -> None:
        """wl lost its admission (it is queued again after this when `requeue`)."""

    def finished(self, wl: WL, succeeded: bool, message: str) -> None:
        """wl finished."""

    def pending(self, wl: WL, message: str) -> None:
        """Why wl waits changed to `message` (Kueue's QuotaReserved=False message)."""


class Model:
    """Kueue's admission rules over one cluster's queues and workloads."""

    def __init__(
        self, *, clock=None, fair_sharing: bool = False,
        admission_fair_sharing: afs.AfsConfig | None = None, listener: Listener | None = None,
        strategy=OneByOne,
    ):  # fmt: skip
        self.clock = clock  # anything with timestamp() (UNIX seconds); None: the wall clock
        # Kueue's configuration `fairSharing.enable`: borrowing is ordered and preempted by
        # dominant resource share.
        self.fair_sharing = fair_sharing
        # Kueue's `admissionFairSharing` configuration: LocalQueues remember usage.
        self.afs = admission_fair_sharing or None
        self.ledger = afs.UsageLedger(self.afs) if self.afs is not None else None
        self.listener = listener or Listener()
        self.evicted_now: set[tuple[str, str]] = set()
        self.refused = False  # the last preemption search failed by a fair-sharing strategy
        self.flavors: dict[str, dict] = {}
        self.flavor_generation = 0  # bumped by every flavor change (PodSet.mismatch)
        self.cohort_objs: dict[str, dict] = {}
        self.cqs: dict[str, CQ] = {}
        self.cq_objs: dict[str, dict] = {}
        self.lqs: dict[tuple[str, str], dict] = {}
        self.ns_labels: dict[str, dict] = {}
        self.workloads: dict[tuple[str, str], WL] = {}
        # The cohort trees (kueuemodel.cohorts): every Cohort by name, and the names of the
        # ClusterQueues in each root's tree.
        self.cohorts: dict[str, cohorts.Cohort] = {}
        self.trees: dict[str, list[str]] = {}
        self.unqueued: set[tuple[str, str]] = set()
        self.dirty_cqs: set[str] = set()
        # What changed since the driver last took these (kubesim writes their statuses).
        self.status_cohorts: set[str] = set()
        self.status_cqs: set[str] = set()
        self.status_lqs: set[tuple[str, str]] = set()
        # Topology-aware scheduling: Topology levels by name, node capacity, what admitted TAS
        # workloads hold per (topology, domain), and queues waiting for capacity.
        self.topologies: dict[str, list[str]] = {}
        self.nodes = tas.Capacity()
        self.tas_used: dict[tuple[str, tuple], Counter] = defaultdict(Counter)
        self.tas_blocked: set[str] = set()
        self.rebuild_needed = False
        self.seq = 0
        self.admissions = 0
        self.preemptions = 0
        self.strategy = strategy(self)

    # ------------------------------------------------------------------ the cluster's objects

    def set_flavor(self, name: str, obj: dict | None) -> None:
        """A ResourceFlavor added, changed or (None) deleted."""
        _put(self.flavors, name, obj)
        self.flavor_generation += 1
        self.rebuild_needed = True

    def set_cohort(self, name: str, obj: dict | None) -> None:
        old = self.cohort_objs.get(name)
        if obj is not None and old is not None and old.get("spec") == obj.get("spec"):
            self.cohort_objs[name] = obj  # its status, which the driver writes
            return
        _put(self.cohort_objs, name, obj)
        self.rebuild_needed = True

    def set_cluster_queue(self, name: str, obj: dict | None) -> None:
        old = self.cq_objs.get(name)
        if obj is not None and old is not None and old.get("spec") == obj.get("spec"):
            return
        _put(self.cq_objs, name, obj)
        self.rebuild_needed = True

    def set_local_queue(self, key: tuple[str, str], obj: dict | None) -> None:
        old = self.lqs.get(key)
        if obj is not None and old is not None and old.get("spec") == obj.get("spec"):
            return
        _put(self.lqs, key, obj)
        self.rebuild_needed = True

    def set_topology(self, name: str, obj: dict | None) -> None:
        levels = None
        if obj is not None:
            levels = [lv.get("nodeLabel", "") for lv in (obj.get("spec") or {}).get("levels") or []]
        _put(self.topologies, name, levels)
        self.capacity_changed()

    def set_namespace(self, name: str, labels: dict | None) -> None:
        """A namespace's labels (for ClusterQueues' namespaceSelector); None: deleted."""
        if labels is None or self.ns_labels.get(name) != labels:
            _put(self.ns_labels, name, labels)
            if self.cqs:
                self.rebuild_needed = True

    def node_event(self, etype: str, obj: dict) -> None:
        if self.nodes.on_node(etype, obj):
            self.capacity_changed()

    def pod_event(self, etype: str, obj: dict) -> None:
        if self.nodes.on_pod(etype, obj):
            self.capacity_changed()

    def capacity_changed(self) -> None:
        """Node capacity changed: queues waiting for room in a topology try again."""
        if self.tas_blocked:
            blocked, self.tas_blocked = self.tas_blocked, set()
            self.unpark(blocked)

    # ------------------------------------------------------------------ workloads

    def add_workload(self, obj: dict, owner: dict | None = None) -> WL:
        """Add a Workload object (created by the driver, a user, or restored from its state):
        admitted as its status says, finished, inactive, or queued. `owner`: its owning job's
        ownerReference, if any."""
        meta, spec = obj["metadata"], obj.get("spec") or {}
        podsets = podsets_of(spec)
        self.seq += 1
        wl = WL(
            ns=meta.get("namespace", ""),
            name=meta["name"],
            uid=meta.get("uid", ""),
            queue=spec.get("queueName", ""),
            priority=int(spec.get("priority") or 0),
            created=meta.get("creationTimestamp", ""),
            seq=self.seq,
            podsets=podsets,
            job=owner["name"] if owner else None,
            job_uid=owner.get("uid", "") if owner else "",
            kind=owner["kind"] if owner else "Job",
        )
        self.workloads[wl.key] = wl
        status = obj.get("status") or {}
        if is_true(obj, "Finished"):
            wl.state = FINISHED
        elif is_true(obj, "QuotaReserved") and status.get("admission"):
            self.restore_admission(wl, status["admission"])
        elif spec.get("active", True) is False:
            wl.state = INACTIVE
        else:
            cond = condition(obj, "QuotaReserved")
            wl.message = (cond or {}).get("message", "")
            self.enqueue(wl)
        return wl

    def update_workload(self, wl: WL, spec: dict) -> None:
        """A Workload's spec changed: deactivated, activated again, or moved to another
        LocalQueue while pending."""
        if spec.get("active", True) is False and wl.state in (PENDING, ADMITTED):
            if wl.state == ADMITTED:
                self.evict(wl, "Deactivated", "The workload is deactivated", requeue=False)
            else:
                self.dequeue(wl)
            wl.state = INACTIVE
        elif spec.get("active", True) is not False and wl.state == INACTIVE:
            wl.state = PENDING
            self.enqueue(wl)
        elif wl.state == PENDING and spec.get("queueName") and spec["queueName"] != wl.queue:
            self.dequeue(wl)
            wl.queue = spec["queueName"]
            self.enqueue(wl)
        if "priority" in spec and int(spec["priority"] or 0) != wl.priority:
            self.set_priority(wl, int(spec["priority"] or 0))

    def set_priority(self, wl: WL, priority: int) -> None:
        """A Workload's priority changed (its job moved to another WorkloadPriorityClass): a
        pending one takes its new place in the queue; an admitted one keeps running, and what
        waits in its cohort tries again, as it may now preempt it (or no longer can)."""
        if wl.state == PENDING:
            self.dequeue(wl)
            wl.priority = priority
            self.enqueue(wl)
            return
        cq = self.cqs.get(wl.cq or "") if wl.state == ADMITTED else None
        if cq is None:
            wl.priority = priority
            return
        cq.discard_admitted(wl)
        wl.priority = priority
        cq.add_admitted(wl)
        self.unpark(self.cohort_of(cq))

    def restore_admission(self, wl: WL, admission: dict) -> None:
        """Take an admission as a Workload's status records it (a restarted Kueue keeps it)."""
        wl.state = ADMITTED
        wl.cq = admission.get("clusterQueue")
        wl.assignment = []
        usage: dict[tuple[str, str], int] = defaultdict(int)
        wl.tas = []
        for ps, psa in zip(wl.podsets, admission.get("podSetAssignments") or [], strict=False):
            flavors = dict(psa.get("flavors") or {})
            wl.assignment.append(flavors)
            topo = self.topology_of(flavors)
            if psa.get("topologyAssignment") and topo:
                plan = tas.read_assignment(
                    psa["topologyAssignment"], self.topologies[topo], self.nodes
                )
                wl.tas.append((topo, plan))
            else:
                wl.tas.append(None)
            for res, units in ps.total().items():
                if res in flavors:
                    usage[(flavors[res], res)] += units
        wl.usage = dict(usage)
        self.charge_tas(wl, +1)
        self.seq += 1
        wl.admitted_seq = self.seq
        if self.ledger is not None:
            self.ledger.hold((wl.ns, wl.queue), wl.usage, +1)
        cq = self.cqs.get(wl.cq or "")
        if cq is not None:
            self.charge(cq, wl.usage, +1)
            cq.add_admitted(wl)
            self.status_cqs.add(cq.name)
        self.status_lqs.add((wl.ns, wl.queue))

    def forget(self, wl: WL) -> None:
        """A Workload is gone: its quota is released, it leaves its queue."""
        if wl.state == ADMITTED:
            self.release(wl)
        elif wl.state == PENDING:
            self.dequeue(wl)
        self.workloads.pop(wl.key, None)
        self.status_lqs.add((wl.ns, wl.queue))

    # ------------------------------------------------------------------ model upkeep

    def rebuild(self) -> None:
        """Recompute queues and usage after a configuration change (rare)."""
        self.rebuild_needed = False
        self.strategy.reset()
        self.cqs = {name: CQ(obj) for name, obj in self.cq_objs.items()}
        for cq in self.cqs.values():
            cq.missing_flavors = [f for f in cq.flavor_names if f not in self.flavors]
        self.cohorts = cohorts.build(self.cqs, self.cohort_objs)
        self.trees = {
            co.name: [cq.name for cq in co.subtree_cqs()]
            for co in self.cohorts.values() if co.parent is None and not co.cycle
        }  # fmt: skip
        self.status_cohorts = set(self.cohorts)
        self.unqueued.clear()
        for wl in sorted(self.workloads.values(), key=lambda w: w.seq):
            if wl.state == ADMITTED:
                cq = self.cqs.get(wl.cq or "")
                if cq is not None:
                    self.charge(cq, wl.usage, +1)
                    cq.add_admitted(wl)
            elif wl.state == PENDING:
                wl.cq = None
                wl.parked = False
                self.enqueue(wl)
        self.dirty_cqs.update(self.cqs)
        self.status_cqs.update(self.cqs)
        self.status_cqs.update(self.cq_objs)
        self.status_lqs.update(self.lqs)

    def charge(self, cq: CQ, usage: dict[tuple[str, str], int], sign: int) -> None:
        """Add (sign 1) or take off (-1) usage in the ClusterQueue and up its cohort tree."""
        parent, used = cq.parent, cq.usage
        if parent is None:
            for fr, units in usage.items():
                used[fr] += sign * units
        elif parent.parent is None:  # under a root (every queue the portal makes): at once
            local, above = cq.local, parent.usage
            for fr, units in usage.items():
                before = used[fr]
                after = used[fr] = before + sign * units
                keep = local.get(fr, 0)
                above[fr] += max(0, after - keep) - max(0, before - keep)
        else:
            for fr, units in usage.items():
                cohorts.add_usage(cq, fr, sign * units)

    def target(self, wl: WL) -> tuple[CQ | None, str]:
        """The ClusterQueue a workload queues in, or why it can't queue."""
        lq = self.lqs.get((wl.ns, wl.queue))
        if lq is None:
            return None, f"LocalQueue {wl.queue} doesn't exist"
        cq_name = (lq.get("spec") or {}).get("clusterQueue", "")
        cq = self.cqs.get(cq_name)
        if cq is None:
            return None, f"ClusterQueue {cq_name} doesn't exist"
        labels = self.ns_labels.get(wl.ns) or {"kubernetes.io/metadata.name": wl.ns}
        if not label_selector_matches(cq.ns_selector, labels):
            return None, "workload namespace doesn't match ClusterQueue selector"
        return cq, ""

    def enqueue(self, wl: WL) -> None:
        cq, why = self.target(wl)
        wl.parked = False
        if cq is None:
            wl.cq = None
            self.unqueued.add(wl.key)
            self.set_pending_message(wl, why)
        else:
            wl.cq = cq.name
            self.strategy.push(wl, cq)
        self.status_lqs.add((wl.ns, wl.queue))

    def dequeue(self, wl: WL) -> None:
        self.unqueued.discard(wl.key)
        cq = self.cqs.get(wl.cq or "")
        if cq is not None:
            self.strategy.remove(wl, cq)
        wl.parked = False
        self.status_lqs.add((wl.ns, wl.queue))

    def unpark(self, cq_names, flavors: set[str] | None = None) -> None:
        """Give parked (inadmissible) workloads another try after capacity was freed (in
        `flavors`, where known)."""
        self.strategy.requeue(cq_names, flavors)

    def cohort_of(self, cq: CQ) -> list[str]:
        """The ClusterQueues that share quota with cq: those of its cohort tree."""
        if cq.parent is None or cq.parent.cycle:
            return [cq.name]
        return self.trees.get(cq.parent.root.name) or [cq.name]

    # ------------------------------------------------------------------ quota arithmetic

    def available(self, cq: CQ, flavor: str, res: str) -> int:
        """Quota the ClusterQueue can still use in (flavor, resource), borrowing included."""
        fr = (flavor, res)
        if fr not in cq.quotas:
            return 0
        return max(0, cohorts.available(cq, fr))

    def capacity(self, cq: CQ, flavor: str, res: str) -> int:
        """The most the ClusterQueue could ever use in (flavor, resource)."""
        fr = (flavor, res)
        if fr not in cq.quotas:
            return 0
        return cohorts.potential(cq, fr)

    def share(self, node) -> cohorts.Share:
        """Kueue's dominant resource share of a ClusterQueue or Cohort (kueuemodel.cohorts):
        what it uses above its quota per thousand of what its parent can lend, over the
        weight. None while within quota or at a root."""
        return cohorts.share(node)

    # ------------------------------------------------------------------ the rules

    def schedule(self) -> int:
        """One scheduling cycle: admit what fits (preempting where the policies allow);
        returns the number of admissions."""
        return scheduler.schedule(self)

    def assign(self, wl: WL, cq: CQ) -> tuple[list[dict[str, str]] | None, bool, str]:
        """Flavors for every pod set: (assignment or None, borrows, pending message)."""
        return flavorassigner.assign(self, wl, cq)

    def find_victims(self, wl: WL, cq: CQ) -> tuple[list[WL], list[dict[str, str]] | None]:
        """A minimal set of admitted workloads whose eviction lets wl fit, and wl's flavors
        then (kueuemodel.preemption); ([], None) when there is none."""
        return preemption.find_victims(self, wl, cq)

    def head(self, cq: CQ) -> tuple | None:
        """(sort key, workload key) of the first workload a ClusterQueue would try, or None."""
        return self.strategy.head(cq)

    def drain(self) -> None:
        """Evict admitted workloads of queues with stopPolicy HoldAndDrain."""
        for cq in self.cqs.values():
            if cq.stop == "HoldAndDrain" and cq.admitted:
                for key in sorted(cq.admitted):
                    self.evict(
                        self.workloads[key], "ClusterQueueStopped", "The ClusterQueue is stopped"
                    )
        for (ns, name), lq in self.lqs.items():
            if ((lq.get("spec") or {}).get("stopPolicy") or "None") != "HoldAndDrain":
                continue
            cq = self.cqs.get((lq.get("spec") or {}).get("clusterQueue", ""))
            if cq is None:
                continue
            for key in sorted(cq.admitted):
                wl = self.workloads[key]
                if wl.ns == ns and wl.queue == name:
                    self.evict(wl, "LocalQueueStopped", "The LocalQueue is stopped")

    # ------------------------------------------------------------------ admission fair sharing

    def set_admission_fair_sharing(self, config: afs.AfsConfig | None) -> None:
        """Run with another admissionFairSharing configuration (as Kueue restarted with it):
        the LocalQueues' usage memory starts again."""
        self.afs = config
        self.ledger = afs.UsageLedger(config) if config is not None else None
        if self.ledger is not None:
            for wl in self.workloads.values():
                if wl.state == ADMITTED:
                    self.ledger.hold((wl.ns, wl.queue), wl.usage, +1)
        self.status_lqs.update(self.lqs)

    def afs_on(self, cq: CQ) -> bool:
        return self.ledger is not None and cq.afs_mode

    def lq_weight(self, key: tuple[str, str]) -> float:
        """A LocalQueue's `spec.fairSharing.weight` (1 unless set)."""
        weight = (((self.lqs.get(key) or {}).get("spec") or {}).get("fairSharing") or {}).get(
            "weight", 1
        )
        try:
            return float(parse_quantity(weight))
        except (TypeError, ValueError):
            return 1.0

    def lq_usage(self, key: tuple[str, str]) -> float:
        """A LocalQueue's weighted usage (admission fair sharing orders by it, lowest first)."""
        return self.ledger.usage(key, self.lq_weight(key)) if self.ledger is not None else 0.0

    def afs_order(self, entry: tuple) -> tuple:
        """Where a queued entry stands under admission fair sharing: its LocalQueue's usage,
        then priority and age."""
        wl = self.workloads[entry[1]]
        return (self.lq_usage((wl.ns, wl.queue)), entry)

    def afs_sample(self) -> None:
        """Each sampling interval, LocalQueues' consumed usage moves toward what they hold."""
        now = self.timestamp()
        if self.ledger is None or not self.ledger.due(now):
            return
        keys = [key for key, lq in self.lqs.items()
                if (cq := self.cqs.get((lq.get("spec") or {}).get("clusterQueue", "")))
                and cq.afs_mode]  # fmt: skip
        self.status_lqs.update(self.ledger.sample(keys, now))

    def timestamp(self) -> float:
        return self.clock.timestamp() if self.clock is not None else time.time()

    # ------------------------------------------------------------------ topology

    def topology_of(self, flavors: dict[str, str]) -> str | None:
        for flavor in flavors.values():
            topo = ((self.flavors.get(flavor) or {}).get("spec") or {}).get("topologyName")
            if topo and topo in self.topologies:
                return topo
        return None

    def charge_tas(self, wl: WL, sign: int) -> None:
        for ps, entry in zip(wl.podsets, wl.tas, strict=False):
            if not entry:
                continue
            topo, plan = entry
            for leaf, n in plan.items():
                held = Counter({res: units * n for res, units in ps.per_pod.items()})
                if sign > 0:
                    self.tas_used[(topo, leaf)].update(held)
                else:
                    self.tas_used[(topo, leaf)].subtract(held)

    # ------------------------------------------------------------------ transitions

    def admit(self, wl: WL, cq: CQ, assignment: list[dict[str, str]]) -> None:
        self.strategy.usage_changed()
        wl.state = ADMITTED
        wl.cq = cq.name
        wl.assignment = assignment
        wl.usage = flavorassigner.usage_of(wl, assignment)
        wl.tas = list(wl.tas_plan)
        self.charge_tas(wl, +1)
        wl.message = ""
        self.seq += 1
        wl.admitted_seq = self.seq
        self.charge(cq, wl.usage, +1)
        cq.add_admitted(wl)
        if self.ledger is not None:
            lq_key = (wl.ns, wl.queue)
            self.ledger.hold(lq_key, wl.usage, +1)
            if cq.afs_mode:
                self.ledger.penalize(lq_key, wl.usage, self.timestamp())
        self.admissions += 1
        self.status_cqs.add(cq.name)
        self.status_lqs.add((wl.ns, wl.queue))
        self.listener.admitted(wl, cq)

    def release(self, wl: WL) -> None:
        """wl's quota (and topology domains) are free again; its cohort's parked workloads
        are tried again."""
        self.strategy.usage_changed()
        if wl.tas:
            self.charge_tas(wl, -1)
            wl.tas = []
            self.capacity_changed()
        cq = self.cqs.get(wl.cq or "")
        if cq is not None and wl.key in cq.admitted:
            cq.discard_admitted(wl)
            self.charge(cq, wl.usage, -1)
            if self.ledger is not None:
                self.ledger.hold((wl.ns, wl.queue), wl.usage, -1)
            self.status_cqs.add(cq.name)
            self.unpark(self.cohort_of(cq), {flavor for flavor, _ in wl.usage})
        self.status_lqs.add((wl.ns, wl.queue))

    def evict(
        self,
        wl: WL,
        reason: str,
        message: str,
        *,
        requeue: bool = True,
        preempted_reason: str | None = None,
    ) -> None:
        self.release(wl)
        wl.state = PENDING
        wl.assignment, wl.usage = [], {}
        wl.message = message
        self.listener.evicted(
            wl, reason, message, requeue=requeue, preempted_reason=preempted_reason
        )
        if requeue:
            self.enqueue(wl)

    def finish(self, wl: WL, succeeded: bool, message: str) -> None:
        if wl.state == ADMITTED:
            self.release(wl)
        elif wl.state == PENDING:
            self.dequeue(wl)
        wl.state = FINISHED
        self.listener.finished(wl, succeeded, message)

    def set_pending_message(self, wl: WL, message: str) -> None:
        if wl.message == message:
            return
        wl.message = message
        self.listener.pending(wl, message)

    def preempt(self, preemptor: WL, cq: CQ, victims: list[WL]) -> None:
        """Evict the victims to make room for preemptor (with Kueue's messages)."""
        preemption.preempt(self, preemptor, cq, victims)

    # ------------------------------------------------------------------ visibility

    def pending_in_cq(self, cq_name: str) -> list[WL]:
        """A ClusterQueue's pending workloads in the order admission would try them."""
        cq = self.cqs.get(cq_name)
        if cq is None:
            return []
        wls = [self.workloads[k] for k in self.strategy.pending(cq)]
        if self.afs_on(cq):
            return sorted(wls, key=lambda w: (self.lq_usage((w.ns, w.queue)), w.sort_key()))
        return sorted(wls, key=WL.sort_key)


def _put(table: dict, key: Any, value: Any) -> None:
    if value is None:
        table.pop(key, None)
    else:
        table[key] = value
