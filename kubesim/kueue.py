"""Kueue controller: Workloads for queued Jobs, quota admission, borrowing, preemption, status.

The engine keeps its own incremental model (usage counters per ClusterQueue, flavor and
resource; per-cohort lendable pool; sorted pending lists) so one admission costs a few dict
operations, not a scan of every workload.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import hashlib
import logging
import os
import threading
import time
import weakref
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from kubesim import afs, cohorts, events, integrations, resources, tas
from kubesim.clock import parse_time
from kubesim.fleet import GPU, format_units, parse_quantity, pod_requests, to_units
from kubesim.scheduler import (
    expression_matches,
    label_selector_matches,
    required_terms,
    taint_text,
    untolerated,
)
from kubesim.store import Conflict, NotFound, deep_copy, now_rfc3339

log = logging.getLogger(__name__)

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
KUEUE_GROUP = resources.KUEUE
VISIBILITY_API_VERSION = "visibility.kueue.x-k8s.io/v1beta1"
KUEUE_MANAGER = "kueue"  # field manager of our writes to Jobs, as in a real cluster

_ENGINES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

PENDING, ADMITTED, FINISHED, INACTIVE = "pending", "admitted", "finished", "inactive"
MAX_SHARE = cohorts.MAX_SHARE  # a weightedShare that cannot be outranked (a zero weight's)
# Kueue's default fair-sharing preemption strategies, tried in this order.
FAIR_STRATEGIES = ("LessThanOrEqualToFinalShare", "LessThanInitialShare")


@dataclass(frozen=True)
class Quota:
    nominal: int
    borrowing: int | None
    lending: int | None
    # What it may lend to the cohort (a lendingLimit above the nominal quota cannot lend more
    # than there is), and the part of nominal quota that is never lent: worked out once, as
    # admission reads them for every workload it tries.
    lendable: int = field(init=False)
    guaranteed: int = field(init=False)

    def __post_init__(self) -> None:
        lendable = self.nominal if self.lending is None else max(0, min(self.lending, self.nominal))
        object.__setattr__(self, "lendable", lendable)
        object.__setattr__(self, "guaranteed", self.nominal - lendable)


@dataclass
class PodSet:
    name: str
    count: int
    per_pod: dict[str, int]
    spec: dict  # pod template spec (read-only), for node selector / tolerations checks
    topology: dict | None = None  # the podSet's topologyRequest (required / preferred label)
    # Why each flavor cannot take it ("" when it can), for the engine's flavor generation.
    mismatch: dict = field(default_factory=dict, repr=False, compare=False)

    def total(self) -> dict[str, int]:
        return {r: v * self.count for r, v in self.per_pod.items()}


@dataclass
class WL:
    """The engine's view of one Workload."""

    ns: str
    name: str
    uid: str
    queue: str
    priority: int
    created: str
    seq: int
    podsets: list[PodSet]
    job: str | None = None  # owning job's name (same namespace): a batch Job, PyTorchJob, JobSet
    job_uid: str = ""
    kind: str = "Job"  # the owner's kind (kubesim.integrations)
    state: str = PENDING
    cq: str | None = None  # ClusterQueue it is queued in or admitted to
    usage: dict[tuple[str, str], int] = field(default_factory=dict)
    assignment: list[dict[str, str]] = field(default_factory=list)
    admitted_seq: int = 0
    message: str = ""
    parked: bool = False
    # Topology-aware placement per pod set: (topology name, pods per lowest-level domain) or
    # None; `tas_plan` is the latest successful assign()'s, `tas` the admitted one.
    tas_plan: list = field(default_factory=list)
    tas: list = field(default_factory=list)
    fair_victim: bool = False  # chosen by fair-sharing preemption (for the Preempted message)
    key: tuple[str, str] = field(init=False)  # (namespace, name), looked up all the time

    def __post_init__(self) -> None:
        self.key = (self.ns, self.name)

    def sort_key(self) -> tuple:
        return (-self.priority, self.created, self.seq)


class CQ:
    """The engine's view of one ClusterQueue."""

    def __init__(self, obj: dict):
        spec = obj.get("spec") or {}
        self.name = obj["metadata"]["name"]
        self.cohort = spec.get("cohortName") or spec.get("cohort") or None
        self.groups: list[tuple[list[str], list[tuple[str, dict[str, Quota]]]]] = []
        self.group_of: dict[str, int] = {}
        self.quotas: dict[tuple[str, str], Quota] = {}
        for index, rg in enumerate(spec.get("resourceGroups") or []):
            covered = list(rg.get("coveredResources") or [])
            flavors = []
            for fl in rg.get("flavors") or []:
                res = {}
                for r in fl.get("resources") or []:
                    q = Quota(
                        to_units(r["name"], r.get("nominalQuota", 0)),
                        _opt_units(r["name"], r.get("borrowingLimit")),
                        _opt_units(r["name"], r.get("lendingLimit")),
                    )
                    res[r["name"]] = q
                    self.quotas[(fl["name"], r["name"])] = q
                flavors.append((fl["name"], res))
            self.groups.append((covered, flavors))
            for r in covered:
                self.group_of[r] = index
        pre = spec.get("preemption") or {}
        self.within = pre.get("withinClusterQueue") or "Never"
        self.reclaim = pre.get("reclaimWithinCohort") or "Never"
        self.strategy = spec.get("queueingStrategy") or "BestEffortFIFO"
        self.stop = spec.get("stopPolicy") or "None"
        self.ns_selector = spec.get("namespaceSelector")
        # Admission fair sharing: pending workloads in their LocalQueues' usage order.
        self.afs_mode = (spec.get("admissionScope") or {}).get(
            "admissionMode"
        ) == afs.ADMISSION_MODE
        # Fair sharing: the weight (default 1; 0 means always last to borrow, first preempted).
        self.weight = cohorts.parse_weight(spec)
        # Its place in a cohort tree (kubesim.cohorts): the Cohort it belongs to (set by the
        # engine's rebuild), and per (flavor, resource) its nominal quota, the part it never
        # lends and its borrowing limit.
        self.parent: cohorts.Cohort | None = None
        self.subtree = {fr: q.nominal for fr, q in self.quotas.items()}
        self.local = {fr: q.guaranteed for fr, q in self.quotas.items() if q.guaranteed}
        self.limit = {fr: q.borrowing for fr, q in self.quotas.items() if q.borrowing is not None}
        self.flavor_names = [f for _, fls in self.groups for f, _ in fls]
        self.usage: dict[tuple[str, str], int] = defaultdict(int)
        self.admitted: set[tuple[str, str]] = set()
        # How many admitted workloads hold each priority: preemption asks "is anything admitted
        # below this priority?" for every workload that does not fit, without a scan.
        self.admitted_priorities: Counter[int] = Counter()
        self.active: list[tuple[tuple, tuple[str, str]]] = []
        self.parked: set[tuple[str, str]] = set()
        self.missing_flavors: list[str] = []

    @property
    def is_active(self) -> bool:
        return not self.missing_flavors and self.stop == "None" and not self.in_cycle

    @property
    def in_cycle(self) -> bool:
        """Its Cohort is on (or below) a cycle of parents: Kueue admits nothing there."""
        return self.parent is not None and self.parent.cycle

    def add_admitted(self, wl: WL) -> None:
        if wl.key not in self.admitted:
            self.admitted.add(wl.key)
            self.admitted_priorities[wl.priority] += 1

    def discard_admitted(self, wl: WL) -> None:
        if wl.key in self.admitted:
            self.admitted.discard(wl.key)
            self.admitted_priorities[wl.priority] -= 1
            if not self.admitted_priorities[wl.priority]:
                del self.admitted_priorities[wl.priority]

    def lowest_admitted_priority(self) -> int | None:
        return min(self.admitted_priorities, default=None)


def _opt_units(resource: str, value: Any) -> int | None:
    return None if value is None else to_units(resource, value)


def workload_name(job_name: str, kind: str = "Job", group: str = "batch") -> str:
    """Kueue-style deterministic Workload name for an owner object."""
    digest = hashlib.sha1(f"{job_name}/{group}/{kind}".encode()).hexdigest()[:5]
    prefix = f"{kind.lower()}-{job_name}"[: 253 - 6]
    return f"{prefix}-{digest}"


def set_condition(
    status: dict, ctype: str, value: str, reason: str, message: str, now: str, gen: int = 1
) -> None:
    """Upsert a condition; lastTransitionTime changes only when the status does."""
    conds = status.setdefault("conditions", [])
    for cond in conds:
        if cond.get("type") == ctype:
            if cond.get("status") != value:
                cond["lastTransitionTime"] = now
            cond.update(status=value, reason=reason, message=message, observedGeneration=gen)
            return
    conds.append(
        {
            "type": ctype,
            "status": value,
            "reason": reason,
            "message": message,
            "lastTransitionTime": now,
            "observedGeneration": gen,
        }
    )


def condition(obj: dict, ctype: str) -> dict | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype:
            return cond
    return None


def is_true(obj: dict, ctype: str) -> bool:
    cond = condition(obj, ctype)
    return bool(cond and cond.get("status") == "True")


class KueueEngine:
    """Kueue's job integration, admission scheduler, preemption and queue status."""

    def __init__(
        self, store, clock=None, fair_sharing: bool | None = None,
        admission_fair_sharing: afs.AfsConfig | bool | None = None,
    ):  # fmt: skip
        self.store = store
        self.clock = clock
        # Kueue's configuration `fairSharing.enable` (KUBESIM_FAIR_SHARING=true, or the server's
        # --fair-sharing): borrowing is ordered and preempted by dominant resource share.
        if fair_sharing is None:
            fair_sharing = os.environ.get("KUBESIM_FAIR_SHARING", "").lower() in ("1", "true")
        self.fair_sharing = fair_sharing
        # Kueue's `admissionFairSharing` configuration (KUBESIM_ADMISSION_FAIR_SHARING, its JSON,
        # or the server's --admission-fair-sharing; False: none): LocalQueues remember usage.
        if admission_fair_sharing is None:
            text = os.environ.get("KUBESIM_ADMISSION_FAIR_SHARING", "")
            admission_fair_sharing = afs.AfsConfig.from_text(text)
        self.afs = admission_fair_sharing or None
        self.ledger = afs.UsageLedger(self.afs) if self.afs is not None else None
        self.evicted_now: set[tuple[str, str]] = set()
        self.refused = False  # the last preemption search failed by a fair-sharing strategy
        self.flavors: dict[str, dict] = {}
        self.flavor_generation = 0  # bumped by every flavor change (PodSet.mismatch)
        self.cohort_objs: dict[str, dict] = {}
        self.cqs: dict[str, CQ] = {}
        self.cq_objs: dict[str, dict] = {}
        self.lqs: dict[tuple[str, str], dict] = {}
        self.wpcs: dict[str, int] = {}
        self.pcs: dict[str, int] = {}
        self.ns_labels: dict[str, dict] = {}
        self.workloads: dict[tuple[str, str], WL] = {}
        # (namespace, owner name, owner kind) -> workload key
        self.by_job: dict[tuple[str, str, str], tuple[str, str]] = {}
        # The cohort trees (kubesim.cohorts): every Cohort by name, and the names of the
        # ClusterQueues in each root's tree.
        self.cohorts: dict[str, cohorts.Cohort] = {}
        self.trees: dict[str, list[str]] = {}
        self.status_cohorts: set[str] = set()
        self.unqueued: set[tuple[str, str]] = set()
        self.dirty_cqs: set[str] = set()
        self.status_cqs: set[str] = set()
        self.status_lqs: set[tuple[str, str]] = set()
        self.jobs_todo: dict[tuple[str, str, str], dict | None] = {}
        # Topology-aware scheduling: Topology levels by name, node capacity, what admitted TAS
        # workloads hold per (topology, domain), queues waiting for capacity, and the pods of
        # TAS jobs by (namespace, job): pod name -> [gated, domain, completion index].
        self.topologies: dict[str, list[str]] = {}
        self.nodes = tas.Capacity()
        self.tas_used: dict[tuple[str, tuple], Counter] = defaultdict(Counter)
        self.tas_blocked: set[str] = set()
        self.tas_pods: dict[tuple[str, str], dict[str, list]] = {}
        self.rebuild_needed = False
        self.seq = 0
        self.admissions = 0
        self.preemptions = 0
        self.first_admission = 0.0  # time.monotonic() of the first and latest admission
        self.last_admission = 0.0
        # Held by the controller thread while it changes the model; readers (visibility) take it.
        self.lock = threading.RLock()
        _ENGINES[store] = self

    # ------------------------------------------------------------------ events

    def on_event(self, etype: str, rt, obj: dict) -> None:
        """Update the model from one store event (called from the controller thread)."""
        plural, group = rt.plural, rt.group
        meta = obj.get("metadata") or {}
        name = meta.get("name", "")
        deleted = etype == "DELETED"
        integration = integrations.for_resource(rt)
        if integration is not None:
            key = (meta.get("namespace"), name, integration.kind)
            if (meta.get("labels") or {}).get(QUEUE_LABEL) or key in self.by_job:
                self.jobs_todo[key] = None if deleted else obj
            return
        if group == KUEUE_GROUP:
            if plural == "workloads":
                self._workload_event(etype, obj)
                return
            if plural == "resourceflavors":
                self._put(self.flavors, name, obj, deleted)
                self.flavor_generation += 1
            elif plural == "cohorts":
                old = self.cohort_objs.get(name)
                if not deleted and old is not None and old.get("spec") == obj.get("spec"):
                    self.cohort_objs[name] = obj  # its status, which the engine writes
                    return
                self._put(self.cohort_objs, name, obj, deleted)
            elif plural == "clusterqueues":
                old = self.cq_objs.get(name)
                if not deleted and old is not None and old.get("spec") == obj.get("spec"):
                    return
                self._put(self.cq_objs, name, obj, deleted)
            elif plural == "localqueues":
                key = (meta.get("namespace"), name)
                if self.ledger is not None:
                    if deleted:
                        self.ledger.forget(key)
                    else:
                        self.ledger.seed(key, obj.get("status"), self._timestamp(), _epoch)
                old = self.lqs.get(key)
                if not deleted and old is not None and old.get("spec") == obj.get("spec"):
                    return
                self._put(self.lqs, key, obj, deleted)
            elif plural == "workloadpriorityclasses":
                self._put(self.wpcs, name, int(obj.get("value", 0)), deleted)
                return
            elif plural == "topologies":
                levels = [
                    lv.get("nodeLabel", "") for lv in (obj.get("spec") or {}).get("levels") or []
                ]
                self._put(self.topologies, name, levels, deleted)
                self._capacity_changed()
                return
            else:
                return
            self.rebuild_needed = True
        elif group == resources.SCHEDULING and plural == "priorityclasses":
            self._put(self.pcs, name, int(obj.get("value", 0)), deleted)
        elif group == "" and plural == "nodes":
            if self.nodes.on_node(etype, obj):
                self._capacity_changed()
        elif group == "" and plural == "pods":
            self._pod_event(etype, obj)
        elif group == "" and plural == "namespaces":
            labels = dict(meta.get("labels") or {})
            labels.setdefault("kubernetes.io/metadata.name", name)
            if self.ns_labels.get(name) != labels or deleted:
                self._put(self.ns_labels, name, labels, deleted)
                if self.cqs:
                    self.rebuild_needed = True

    def _pod_event(self, etype: str, obj: dict) -> None:
        if self.nodes.on_pod(etype, obj):
            self._capacity_changed()
        meta = obj["metadata"]
        if (meta.get("labels") or {}).get(tas.TAS_LABEL) != "true":
            return
        owner = next(
            (r["name"] for r in meta.get("ownerReferences") or [] if r.get("kind") == "Job"), None
        )
        if owner is None:
            return
        key = (meta.get("namespace", ""), owner)
        pods = self.tas_pods.setdefault(key, {})
        spec = obj.get("spec") or {}
        if etype == "DELETED" or (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            pods.pop(meta["name"], None)
            if not pods:
                self.tas_pods.pop(key, None)
            return
        gated = any(g.get("name") == tas.TOPOLOGY_GATE for g in spec.get("schedulingGates") or [])
        index = (meta.get("labels") or {}).get(tas.INDEX_LABEL, "")
        pods[meta["name"]] = [gated, dict(spec.get("nodeSelector") or {}), index]

    def _capacity_changed(self) -> None:
        """Node capacity changed: queues waiting for room in a topology try again."""
        if self.tas_blocked:
            blocked, self.tas_blocked = self.tas_blocked, set()
            self._unpark(blocked)

    @staticmethod
    def _put(table: dict, key: Any, value: Any, deleted: bool) -> None:
        if deleted:
            table.pop(key, None)
        else:
            table[key] = value

    def _workload_event(self, etype: str, obj: dict) -> None:
        meta = obj["metadata"]
        key = (meta.get("namespace", ""), meta["name"])
        wl = self.workloads.get(key)
        if etype == "DELETED":
            if wl is not None and wl.uid == meta.get("uid"):
                self._forget(wl)
                if wl.job:
                    # Kueue recreates the Workload of a live Job; reconcile the Job again.
                    self.jobs_todo.setdefault((wl.ns, wl.job, wl.kind), {})
            return
        if wl is None or wl.uid != meta.get("uid"):
            if wl is not None:
                self._forget(wl)
            self._adopt(obj)
            return
        spec = obj.get("spec") or {}
        if spec.get("active", True) is False and wl.state in (PENDING, ADMITTED):
            if wl.state == ADMITTED:
                self._evict(wl, "Deactivated", "The workload is deactivated", requeue=False)
            else:
                self._dequeue(wl)
            wl.state = INACTIVE
        elif spec.get("active", True) is not False and wl.state == INACTIVE:
            wl.state = PENDING
            self._enqueue(wl)
        elif wl.state == PENDING and spec.get("queueName") and spec["queueName"] != wl.queue:
            self._dequeue(wl)
            wl.queue = spec["queueName"]
            self._enqueue(wl)

    def _adopt(self, obj: dict) -> WL:
        """Add a Workload object (created by us, a user, or restored from a state file)."""
        meta, spec = obj["metadata"], obj.get("spec") or {}
        owner = next(
            (r for r in meta.get("ownerReferences") or [] if integrations.for_owner(r)), None
        )
        podsets = [
            PodSet(
                ps.get("name", "main"),
                int(ps.get("count", 1)),
                pod_requests((ps.get("template") or {}).get("spec") or {}),
                (ps.get("template") or {}).get("spec") or {},
                ps.get("topologyRequest") or None,
            )
            for ps in spec.get("podSets") or []
        ]
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
        if wl.job:
            self.by_job[(wl.ns, wl.job, wl.kind)] = wl.key
        status = obj.get("status") or {}
        if is_true(obj, "Finished"):
            wl.state = FINISHED
        elif is_true(obj, "QuotaReserved") and status.get("admission"):
            self._restore_admission(wl, status["admission"])
        elif spec.get("active", True) is False:
            wl.state = INACTIVE
        else:
            cond = condition(obj, "QuotaReserved")
            wl.message = (cond or {}).get("message", "")
            self._enqueue(wl)
        return wl

    def _restore_admission(self, wl: WL, admission: dict) -> None:
        wl.state = ADMITTED
        wl.cq = admission.get("clusterQueue")
        wl.assignment = []
        usage: dict[tuple[str, str], int] = defaultdict(int)
        wl.tas = []
        for ps, psa in zip(wl.podsets, admission.get("podSetAssignments") or [], strict=False):
            flavors = dict(psa.get("flavors") or {})
            wl.assignment.append(flavors)
            topo = self._topology_of(flavors)
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
        self._charge_tas(wl, +1)
        self.seq += 1
        wl.admitted_seq = self.seq
        if self.ledger is not None:
            self.ledger.hold((wl.ns, wl.queue), wl.usage, +1)
        cq = self.cqs.get(wl.cq or "")
        if cq is not None:
            self._charge(cq, wl.usage, +1)
            cq.add_admitted(wl)
            self.status_cqs.add(cq.name)
        self.status_lqs.add((wl.ns, wl.queue))

    def _forget(self, wl: WL) -> None:
        if wl.state == ADMITTED:
            self._release(wl)
        elif wl.state == PENDING:
            self._dequeue(wl)
        self.workloads.pop(wl.key, None)
        if wl.job and self.by_job.get((wl.ns, wl.job, wl.kind)) == wl.key:
            del self.by_job[(wl.ns, wl.job, wl.kind)]
        self.status_lqs.add((wl.ns, wl.queue))

    # ------------------------------------------------------------------ model upkeep

    def rebuild(self) -> None:
        """Recompute queues and usage after a configuration change (rare)."""
        self.rebuild_needed = False
        self._usage_changed()
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
                    self._charge(cq, wl.usage, +1)
                    cq.add_admitted(wl)
            elif wl.state == PENDING:
                wl.cq = None
                wl.parked = False
                self._enqueue(wl)
        self.dirty_cqs.update(self.cqs)
        self.status_cqs.update(self.cqs)
        self.status_cqs.update(self.cq_objs)
        self.status_lqs.update(self.lqs)

    def _charge(self, cq: CQ, usage: dict[tuple[str, str], int], sign: int) -> None:
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

    def _target(self, wl: WL) -> tuple[CQ | None, str]:
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
            return None, "Workload namespace doesn't match ClusterQueue selector"
        return cq, ""

    def _enqueue(self, wl: WL) -> None:
        cq, why = self._target(wl)
        wl.parked = False
        if cq is None:
            wl.cq = None
            self.unqueued.add(wl.key)
            self._set_pending_message(wl, why)
        else:
            wl.cq = cq.name
            bisect.insort(cq.active, (wl.sort_key(), wl.key))
            self.dirty_cqs.add(cq.name)
            self.status_cqs.add(cq.name)
        self.status_lqs.add((wl.ns, wl.queue))

    def _dequeue(self, wl: WL) -> None:
        self.unqueued.discard(wl.key)
        cq = self.cqs.get(wl.cq or "")
        if cq is not None:
            if wl.parked:
                cq.parked.discard(wl.key)
            else:
                entry = (wl.sort_key(), wl.key)
                i = bisect.bisect_left(cq.active, entry)
                if i < len(cq.active) and cq.active[i] == entry:
                    del cq.active[i]
            self.status_cqs.add(cq.name)
        wl.parked = False
        self.status_lqs.add((wl.ns, wl.queue))

    def _unpark(self, cq_names, flavors: set[str] | None = None) -> None:
        """Give parked (inadmissible) workloads another try after capacity was freed (in
        `flavors`, where known; every parked workload is tried again all the same)."""
        for name in cq_names:
            cq = self.cqs.get(name)
            if cq is None:
                continue
            if cq.active:
                # A StrictFIFO head never parks: it is simply tried again.
                self.dirty_cqs.add(name)
            if not cq.parked:
                continue
            for key in cq.parked:
                wl = self.workloads[key]
                wl.parked = False
                bisect.insort(cq.active, (wl.sort_key(), key))
            cq.parked.clear()
            self.dirty_cqs.add(name)

    def _cohort_of(self, cq: CQ) -> list[str]:
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

    # ------------------------------------------------------------------ fair sharing

    def share(self, node) -> cohorts.Share:
        """Kueue's dominant resource share of a ClusterQueue or Cohort (kubesim.cohorts):
        what it uses above its quota per thousand of what its parent can lend, over the
        weight. None while within quota or at a root."""
        return cohorts.share(node)

    def _request_on_flavor(self, wl: WL, cq: CQ) -> dict[tuple[str, str], int]:
        """The usage wl would add in cq: each resource on the first flavor that suits its
        pod set (the flavor assign() tries first)."""
        usage: dict[tuple[str, str], int] = defaultdict(int)
        for ps in wl.podsets:
            for res, units in ps.total().items():
                gi = cq.group_of.get(res)
                if gi is None:
                    continue
                for flavor, fres in cq.groups[gi][1]:
                    if res in fres and not self._mismatch(flavor, ps):
                        usage[(flavor, res)] += units
                        break
        return dict(usage)

    def _head(self, cq: CQ) -> tuple | None:
        """(sort key, workload key) of the first workload a ClusterQueue would try, or None."""
        if not cq.active:
            return None
        if self._afs_on(cq):
            return min(cq.active, key=self._afs_order)
        return cq.active[0]

    # ------------------------------------------------------------------ admission fair sharing

    def set_admission_fair_sharing(self, config: afs.AfsConfig | None) -> None:
        """Run with another admissionFairSharing configuration (as Kueue restarted with it):
        the LocalQueues' usage memory starts again."""
        with self.lock:
            self.afs = config
            self.ledger = afs.UsageLedger(config) if config is not None else None
            if self.ledger is not None:
                for wl in self.workloads.values():
                    if wl.state == ADMITTED:
                        self.ledger.hold((wl.ns, wl.queue), wl.usage, +1)
            self.status_lqs.update(self.lqs)

    def _afs_on(self, cq: CQ) -> bool:
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

    def _afs_order(self, entry: tuple) -> tuple:
        """Where a queued entry stands under admission fair sharing: its LocalQueue's usage,
        then priority and age."""
        wl = self.workloads[entry[1]]
        return (self.lq_usage((wl.ns, wl.queue)), entry)

    def _afs_sample(self) -> None:
        """Each sampling interval, LocalQueues' consumed usage moves toward what they hold."""
        now = self._timestamp()
        if self.ledger is None or not self.ledger.due(now):
            return
        keys = [key for key, lq in self.lqs.items()
                if (cq := self.cqs.get((lq.get("spec") or {}).get("clusterQueue", "")))
                and cq.afs_mode]  # fmt: skip
        self.status_lqs.update(self.ledger.sample(keys, now))

    def _timestamp(self) -> float:
        return self.clock.timestamp() if self.clock is not None else time.time()

    def _head_order(self, name: str) -> tuple:
        """Where a ClusterQueue's head stands in Kueue's ordering of a cycle's heads: higher
        priority first, then older; a queue with nothing waiting last."""
        cq = self.cqs.get(name)
        head = self._head(cq) if cq is not None else None
        if head is None:
            return (1, (), name)
        return (0, head[0], name)

    def _schedule_fair(self, names: list[str]) -> int:
        """The borrowing pass under fair sharing, one workload at a time per cohort tree: the
        ClusterQueue whose head wins the tree's tournament goes next (see _tournament)."""
        admitted = 0
        trees: dict[str, dict[str, CQ]] = defaultdict(dict)
        for name in names:
            cq = self.cqs.get(name)
            if cq is None:
                continue
            if cq.parent is not None and not cq.parent.cycle:
                trees[cq.parent.root.name][name] = cq
            else:
                admitted += self._schedule_cq(cq, True)
        for root, left in trees.items():
            rounds = 4 * len(self.workloads) + 16  # preemptions cannot ping-pong for ever
            while left and rounds:
                rounds -= 1
                cq = self._tournament(self.cohorts[root], left)
                if cq is None:
                    break
                if self._schedule_cq(cq, True, limit=1) == 0:
                    del left[cq.name]
                else:
                    admitted += 1
        return admitted

    def _tournament(self, root: cohorts.Cohort, left: dict[str, CQ]) -> CQ | None:
        """Kueue's fair-sharing tournament over a cohort tree: each ClusterQueue's head is
        given its queue's share, and each Cohort's on the way up, as if it were admitted; at
        each Cohort, from the winners of its child Cohorts and the heads of its ClusterQueues,
        one that borrows nothing it asks for goes first, then the lowest share of the child it
        comes through, then the higher priority, then the older."""
        entries = {}
        for name, cq in list(left.items()):
            head = self._head(cq)
            if head is None:
                del left[name]
                continue
            request = self._request_on_flavor(self.workloads[head[1]], cq)
            self._charge(cq, request, +1)
            try:
                shares, node, current = {}, cq.parent, cohorts.share(cq)
                while node is not None:
                    shares[node.name] = current
                    current = cohorts.share(node)
                    node = node.parent
            finally:
                self._charge(cq, request, -1)
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
        return self.cqs[winner] if winner is not None else None

    def _mismatch(self, flavor: str, ps: PodSet) -> str:
        """_flavor_mismatch for a pod set, worked out once per flavor generation."""
        key = (self.flavor_generation, flavor)
        why = ps.mismatch.get(key)
        if why is None:
            if len(ps.mismatch) > 16:
                ps.mismatch.clear()
            why = ps.mismatch[key] = self._flavor_mismatch(flavor, ps.spec)
        return why

    def _flavor_mismatch(self, flavor: str, spec: dict) -> str:
        fobj = self.flavors.get(flavor) or {}
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
                exprs = [
                    e for e in term.get("matchExpressions") or [] if e.get("key") in node_labels
                ]
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

    def assign(self, wl: WL, cq: CQ) -> tuple[list[dict[str, str]] | None, bool, str]:
        """Flavors for every pod set: (assignment or None, borrows, pending message)."""
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
                    why = self._mismatch(flavor, ps)
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
                        cap = self.capacity(cq, flavor, res)
                        if need > cap:
                            before = taken[(flavor, res)]
                            request = (
                                f"previously considered podsets requests ({_fmt(res, before)}) + "
                                f"current podset request ({_fmt(res, units)})"
                                if before
                                else "request"
                            )
                            fail = (
                                f"insufficient quota for {res} in flavor {flavor}, {request} > "
                                f"maximum capacity ({_fmt(res, need)} > {_fmt(res, cap)})"
                                if not before
                                else f"insufficient quota for {res} in flavor {flavor}, "
                                f"{request} > maximum capacity ({_fmt(res, cap)})"
                            )
                            break
                        avail = self.available(cq, flavor, res)
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
                        ps_plan, fail = self._tas_place(ps, flavor, tas_taken)
                        if fail:
                            self.tas_blocked.add(cq.name)
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

    def _tas_place(self, ps: PodSet, flavor: str, taken: dict) -> tuple[tuple | None, str]:
        """Where a pod set's pods go in the flavor's topology: ((topology, pods per domain),
        "") or (None, Kueue's reason)."""
        fspec = (self.flavors.get(flavor) or {}).get("spec") or {}
        topo = fspec.get("topologyName")
        if not topo:
            return None, f'Flavor "{flavor}" does not support TopologyAwareScheduling'
        levels = self.topologies.get(topo)
        if levels is None:
            return None, f'topology "{topo}" not found'
        label = ps.topology.get("required") or ps.topology.get("preferred")
        if label not in levels:
            return None, f'topology "{topo}" has no level {label}'
        tolerations = list(ps.spec.get("tolerations") or []) + list(fspec.get("tolerations") or [])
        fit = {}
        node_labels = fspec.get("nodeLabels") or {}
        for leaf, free in self.nodes.leaves(levels, node_labels, tolerations).items():
            for held in (self.tas_used.get((topo, leaf)), taken.get((topo, leaf))):
                if held:
                    free = free - held
            fit[leaf] = tas.fits(free, ps.per_pod)
        plan, most = tas.place(levels, fit, ps.count, ps.topology) if fit else (None, 0)
        if plan is None:
            return None, f'topology "{topo}" allows to fit only {most} out of {ps.count} pod(s)'
        for leaf, n in plan.items():
            taken[(topo, leaf)].update({res: units * n for res, units in ps.per_pod.items()})
        return (topo, plan), ""

    def _topology_of(self, flavors: dict[str, str]) -> str | None:
        for flavor in flavors.values():
            topo = ((self.flavors.get(flavor) or {}).get("spec") or {}).get("topologyName")
            if topo and topo in self.topologies:
                return topo
        return None

    def _charge_tas(self, wl: WL, sign: int) -> None:
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

    def _ungate(self) -> None:
        """Kueue's topology ungater: give each gated pod of an admitted TAS workload a node
        selector for a domain its assignment still has room in, and lift the gate."""
        for (ns, job), pods in list(self.tas_pods.items()):
            gated = sorted(
                (name for name, v in pods.items() if v[0]),
                key=lambda name: (int(pods[name][2]) if pods[name][2].isdigit() else 0, name),
            )
            if not gated:
                continue
            key = self.by_job.get((ns, job, "Job"))
            wl = self.workloads.get(key) if key else None
            if wl is None or wl.state != ADMITTED or not wl.tas or not wl.tas[0]:
                continue
            topo, plan = wl.tas[0]
            levels = self.topologies.get(topo)
            if not levels:
                continue
            placed: Counter = Counter()
            for gated_now, selector, _ in pods.values():
                if not gated_now:
                    leaf = self._leaf_of_selector(levels, selector)
                    if leaf:
                        placed[leaf] += 1
            for name in gated:
                leaf = next((lf for lf in sorted(plan) if placed[lf] < plan[lf]), None)
                if leaf is None:
                    break
                selector = tas.selector_for(levels, leaf)
                if self._ungate_pod(ns, name, selector):
                    placed[leaf] += 1
                    pods[name][0], pods[name][1] = False, selector

    def _leaf_of_selector(self, levels: list[str], selector: dict) -> tuple | None:
        out = tas.assignment_levels(levels)
        if out != levels:
            return self.nodes.node_leaf(levels, selector.get(tas.HOSTNAME, ""))
        if all(level in selector for level in levels):
            return tuple(selector[level] for level in levels)
        return None

    def _ungate_pod(self, ns: str, name: str, selector: dict[str, str]) -> bool:
        rt = resources.PODS
        with self.store.lock:
            try:
                pod = self.store.get(rt, ns, name)
            except NotFound:
                return False
            spec = pod.setdefault("spec", {})
            gates = [
                g for g in spec.get("schedulingGates") or [] if g.get("name") != tas.TOPOLOGY_GATE
            ]
            if gates:
                spec["schedulingGates"] = gates
            else:
                spec.pop("schedulingGates", None)
            spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **selector}
            self.store.update(rt, pod, check_rv=False, manager=KUEUE_MANAGER)
        return True

    @staticmethod
    def usage_of(wl: WL, assignment: list[dict[str, str]]) -> dict[tuple[str, str], int]:
        usage: dict[tuple[str, str], int] = defaultdict(int)
        for ps, flavors in zip(wl.podsets, assignment, strict=True):
            for res, units in ps.total().items():
                if res in flavors:
                    usage[(flavors[res], res)] += units
        return dict(usage)

    # ------------------------------------------------------------------ scheduling

    def schedule(self) -> int:
        """Admit what fits; returns the number of admissions."""
        if self.rebuild_needed:
            self.rebuild()
            self.drain()
        if self.tas_pods:
            self._ungate()
        self._afs_sample()
        admitted = 0
        # A workload evicted in this round does not preempt others in it: its quota frees only
        # once its pods are gone, and otherwise reclaim and priority could evict each other
        # round and round at one instant (a borrower reclaimed by a lower priority, which is
        # preempted in its own queue by one its first victim's queue then reclaims from).
        self.evicted_now: set[tuple[str, str]] = set()
        while self.dirty_cqs:
            names = sorted(self.dirty_cqs)
            self.dirty_cqs.clear()
            # Workloads that fit without borrowing go first, as in Kueue's cycle ordering; then
            # the borrowers, the ClusterQueue whose head comes first (priority, then age) first.
            for allow_borrow in (False, True):
                if allow_borrow and self.fair_sharing:
                    admitted += self._schedule_fair(names)
                    continue
                if allow_borrow:
                    names.sort(key=self._head_order)
                for name in names:
                    cq = self.cqs.get(name)
                    if cq is not None:
                        admitted += self._schedule_cq(cq, allow_borrow)
        return admitted

    def _schedule_cq(self, cq: CQ, allow_borrow: bool, limit: int = 0) -> int:
        if not cq.active:
            return 0
        if not cq.is_active:
            why = (
                f"ClusterQueue {cq.name} is inactive"
                if cq.missing_flavors or cq.in_cycle
                else f"ClusterQueue {cq.name} is stopped"
            )
            for _, key in cq.active:
                self._set_pending_message(self.workloads[key], why)
            return 0
        admitted = 0
        strict = cq.strategy == "StrictFIFO"
        # The order tried: the queue itself, or under admission fair sharing a copy in its
        # LocalQueues' usage order (taken again after each admission, which raises a usage).
        fair = self._afs_on(cq)
        view = sorted(cq.active, key=self._afs_order) if fair else cq.active

        def take(index: int) -> None:
            entry = view.pop(index)
            if fair:
                cq.active.remove(entry)

        i = 0
        while i < len(view):
            _, key = view[i]
            wl = self.workloads[key]
            lq = self.lqs.get((wl.ns, wl.queue))
            lq_stop = ((lq or {}).get("spec") or {}).get("stopPolicy") or "None"
            if lq_stop != "None":
                self._set_pending_message(wl, f"LocalQueue {wl.queue} is stopped")
                i += 1
                continue
            assignment, borrows, message = self.assign(wl, cq)
            if assignment is not None:
                if borrows and not allow_borrow:
                    if strict:
                        return admitted
                    i += 1
                    continue
                take(i)
                self._admit(wl, cq, assignment)
                admitted += 1
                if limit and admitted >= limit:
                    return admitted
                if fair:
                    view[i:] = sorted(view[i:], key=self._afs_order)
                continue
            victims, assignment = self._find_victims(wl, cq) if allow_borrow else ([], None)
            if victims:
                take(i)
                self._preempt(wl, cq, victims)
                self._admit(wl, cq, assignment)
                admitted += 1
                if limit and admitted >= limit:
                    return admitted
                i = 0  # evicted workloads re-entered the queue
                if fair:
                    view = sorted(cq.active, key=self._afs_order)
                continue
            if not allow_borrow:
                # It may still fit once borrowing is allowed in the second pass.
                if strict:
                    self._set_pending_message(wl, message)
                    return admitted
                i += 1
                continue
            self._set_pending_message(wl, message)
            if strict:
                return admitted
            take(i)
            wl.parked = True
            cq.parked.add(key)
        return admitted

    def _usage_changed(self) -> None:
        """A hook for what depends on usage: called on every admission and release."""

    # ------------------------------------------------------------------ preemption

    def _find_victims(self, wl: WL, cq: CQ) -> tuple[list[WL], list[dict[str, str]] | None]:
        """A minimal set of admitted workloads whose eviction lets wl fit, per Kueue's policies
        (under fair sharing, its fair-sharing preemption alone, as in Kueue)."""
        self.refused = False
        if wl.key in self.evicted_now:
            return [], None
        if self.fair_sharing:
            return self._fair_preemptions(wl, cq)
        same, others = [], []
        lowest = cq.lowest_admitted_priority()
        if lowest is not None and (
            (cq.within == "LowerPriority" and lowest < wl.priority)
            or (cq.within == "LowerOrNewerEqualPriority" and lowest <= wl.priority)
        ):
            for key in cq.admitted:
                other = self.workloads[key]
                if other.priority < wl.priority or (
                    cq.within == "LowerOrNewerEqualPriority"
                    and other.priority == wl.priority
                    and other.sort_key() > wl.sort_key()
                ):
                    same.append(other)
        reclaimable = self._reclaimable(wl, cq) if cq.reclaim in ("Any", "LowerPriority") else {}
        if reclaimable:
            for name in self._cohort_of(cq):
                ocq = self.cqs[name]
                borrowing = [fr for fr in reclaimable if fr in ocq.quotas and ocq.usage[fr] > 0
                             and ocq.usage[fr] > ocq.quotas[fr].nominal]  # fmt: skip
                if name == cq.name or not borrowing:
                    continue
                for key in ocq.admitted:
                    other = self.workloads[key]
                    if cq.reclaim == "LowerPriority" and other.priority >= wl.priority:
                        continue
                    if any(fr in other.usage for fr in borrowing):
                        others.append(other)
        if not same and not others:
            return [], None
        if not self._room_without(wl, cq, others + same):
            # Evicting every candidate would leave no room: neither would any subset.
            return [], None
        # Borrowers in other queues first, then lowest priority, then most recently admitted.
        others.sort(key=lambda w: (w.priority, -w.admitted_seq))
        if self._afs_on(cq):  # the LocalQueue that used most loses first (then as usual)
            same.sort(key=lambda w: (-self.lq_usage((w.ns, w.queue)), w.priority, -w.admitted_seq))
        else:
            same.sort(key=lambda w: (w.priority, -w.admitted_seq))
        for candidates, reclaiming in ((others + same, True), (same, False)):
            if not candidates:
                continue
            victims, assignment = self._simulate(wl, cq, candidates, reclaiming)
            if victims:
                return victims, assignment
        return [], None

    # -- fair-sharing preemption (Kueue's, with fair sharing on: pkg/scheduler/preemption)

    def _fair_preemptions(self, wl: WL, cq: CQ) -> tuple[list[WL], list[dict[str, str]] | None]:
        """Victims for wl under fair sharing, as Kueue chooses them: candidates are its own
        queue's admitted workloads its withinClusterQueue policy may take, and those of the
        tree's queues that borrow what it asks for that its reclaimWithinCohort policy may
        take. With wl's usage added, targets go queue by queue, the highest share first (down
        the tree, see _next_target): from its own queue by priority; while its queue stays
        within nominal quota, from others without more ado; otherwise only while its share
        stays at most the target's after the eviction (LessThanOrEqualToFinalShare), and
        failing that, one workload per queue while it is below the target's share before
        (LessThanInitialShare); shares compared below the Cohort both queues are under. Then
        every victim not needed after all, the latest first, is put back."""
        request = self._request_on_flavor(wl, cq)
        frs = set(request)
        candidates = self._fair_candidates(wl, cq, frs)
        if not candidates or not self._room_without(wl, cq, candidates):
            return [], None
        candidates.sort(key=functools.cmp_to_key(lambda a, b: self._candidate_cmp(a, b, cq)))
        removed: list[WL] = []
        self._charge(cq, request, +1)
        try:
            fits, retry = self._fair_first(wl, cq, request, candidates, removed)
            if not fits and retry:
                fits = self._fair_second(wl, cq, request, retry, removed)
        finally:
            self._charge(cq, request, -1)
        try:
            if not fits:
                # The strategies refused: unlike "no room", which holds for any workload larger
                # or of lower priority, their verdict depends on the order victims were weighed.
                self.refused = True
                return [], None
            # Put back, latest first, those it fits without (Kueue's fill-back: the last
            # victim takes the place of one put back).
            for i in range(len(removed) - 2, -1, -1):
                back = removed[i]
                self._charge(self.cqs[back.cq], back.usage, +1)
                if self.assign(wl, cq)[0] is not None:
                    removed[i] = removed[-1]
                    removed.pop()
                else:
                    self._charge(self.cqs[back.cq], back.usage, -1)
            assignment = self.assign(wl, cq)[0]
            return (list(removed), assignment) if assignment is not None else ([], None)
        finally:
            for v in removed:
                self._charge(self.cqs[v.cq], v.usage, +1)

    def _fair_candidates(self, wl: WL, cq: CQ, frs: set) -> list[WL]:
        def allowed(other: WL, policy: str) -> bool:
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
            out += [w for k in cq.admitted if allowed(w := self.workloads[k], cq.within)]
        if cq.parent is not None and cq.reclaim != "Never":
            for name in self._cohort_of(cq):
                ocq = self.cqs[name]
                if name == cq.name or not any(ocq.usage[fr] > ocq.subtree.get(fr, 0)
                                              for fr in frs):  # fmt: skip
                    continue
                out += [w for k in ocq.admitted if allowed(w := self.workloads[k], cq.reclaim)]
        return out

    def _candidate_cmp(self, a: WL, b: WL, cq: CQ) -> int:
        """Kueue's order of preemption candidates: other queues' first; within a queue under
        admission fair sharing, the LocalQueue that used most; the lowest priority; the most
        recently admitted."""
        if (a.cq == cq.name) != (b.cq == cq.name):
            return 1 if a.cq == cq.name else -1
        if a.cq == b.cq and a.queue != b.queue and self._afs_on(self.cqs[a.cq]):
            ua, ub = self.lq_usage((a.ns, a.queue)), self.lq_usage((b.ns, b.queue))
            if ua != ub:
                return -1 if ua > ub else 1
        if a.priority != b.priority:
            return -1 if a.priority < b.priority else 1
        return b.admitted_seq - a.admitted_seq

    def _fits_without(self, wl: WL, cq: CQ, request: dict) -> bool:
        """Whether wl fits now, its own usage (added while shares are weighed) taken off."""
        self._charge(cq, request, -1)
        try:
            return self.assign(wl, cq)[0] is not None
        finally:
            self._charge(cq, request, +1)

    def _evict_for(self, victim: WL, removed: list[WL], fair: bool = False) -> None:
        victim.fair_victim = fair
        self._charge(self.cqs[victim.cq], victim.usage, -1)
        removed.append(victim)

    def _fair_first(self, wl, cq, request, candidates, removed) -> tuple[bool, list[WL]]:
        """Kueue's first pass (its rules S2-a, and the queue's own or within-nominal
        targets): (fits, the candidates the strategy refused, to try again)."""
        targets = _Targets(self, cq, candidates)
        retry: list[WL] = []
        within = all(cq.usage[fr] <= cq.subtree.get(fr, 0) for fr in request)
        for target in targets:
            if target is cq or within:
                self._evict_for(targets.pop(target), removed)
                if self._fits_without(wl, cq, request):
                    return True, retry
                continue
            mine, theirs = targets.shares(target)
            if mine.infinite and not theirs.infinite:
                while targets.has(target):  # no workload of theirs can pass
                    retry.append(targets.pop(target))
                continue
            while targets.has(target):
                victim = targets.pop(target)
                self._charge(target, victim.usage, -1)
                try:
                    after = targets.shares(target)[1]
                finally:
                    self._charge(target, victim.usage, +1)
                if mine.key <= after.key:
                    self._evict_for(victim, removed, fair=True)
                    if self._fits_without(wl, cq, request):
                        return True, retry
                    break
                retry.append(victim)
        return False, retry

    def _fair_second(self, wl, cq, request, retry, removed) -> bool:
        """Kueue's second pass (rule S2-b): one refused candidate per queue, highest share
        first, while wl's share is below the target's before the eviction."""
        targets = _Targets(self, cq, retry)
        for target in targets:
            mine, theirs = targets.shares(target)
            victim = targets.pop(target)
            if mine.key < theirs.key:
                self._evict_for(victim, removed, fair=True)
                if self._fits_without(wl, cq, request):
                    return True
            targets.drop(target)
        return False

    def _reclaimable(self, wl: WL, cq: CQ) -> set[tuple[str, str]]:
        """(flavor, resource) pairs where reclaiming borrowed quota could make wl fit.

        Reclaim needs the request to fit within cq's own nominal quota, and the cohort's
        borrowers to hold at least the shortfall; anything else cannot help, so it is cheap
        to rule out before looking at individual workloads.
        """
        if cq.parent is None:
            return set()
        out: set[tuple[str, str]] = set()
        for ps in wl.podsets:
            for res, units in ps.total().items():
                gi = cq.group_of.get(res)
                if gi is None:
                    continue
                for flavor, fres in cq.groups[gi][1]:
                    fr = (flavor, res)
                    if res not in fres or cq.usage[fr] + units > fres[res].nominal:
                        continue
                    shortfall = units - self.available(cq, flavor, res)
                    borrowed = 0
                    for name in self._cohort_of(cq):
                        ocq = self.cqs[name]
                        q = ocq.quotas.get(fr)
                        if name != cq.name and q is not None:
                            borrowed += max(0, ocq.usage[fr] - q.nominal)
                    if borrowed >= shortfall:
                        out.add(fr)
        return out

    def _room_without(self, wl: WL, cq: CQ, candidates: list[WL]) -> bool:
        """Whether wl would fit, borrowing or not, were all the candidates evicted (their usage
        taken off as one sum per ClusterQueue: the counters end the same)."""
        freed: dict[str, dict[tuple[str, str], int]] = defaultdict(lambda: defaultdict(int))
        for cand in candidates:
            for fr, units in cand.usage.items():
                freed[cand.cq][fr] += units
        for name, usage in freed.items():
            self._charge(self.cqs[name], usage, -1)
        try:
            return self.assign(wl, cq)[0] is not None
        finally:
            for name, usage in freed.items():
                self._charge(self.cqs[name], usage, +1)

    def _simulate(
        self, wl: WL, cq: CQ, candidates: list[WL], reclaiming: bool
    ) -> tuple[list[WL], list[dict[str, str]] | None]:
        removed: list[WL] = []
        found = None
        try:
            for cand in candidates:
                self._charge(self.cqs[cand.cq], cand.usage, -1)
                removed.append(cand)
                assignment, borrows, _ = self.assign(wl, cq)
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
                self._charge(self.cqs[cand.cq], cand.usage, +1)
                assignment, borrows, _ = self.assign(wl, cq)
                if assignment is not None and not (
                    borrows
                    and reclaiming
                    and any(c.cq != cq.name for c in removed if c is not cand)
                ):
                    removed.remove(cand)
                    found = assignment
                else:
                    self._charge(self.cqs[cand.cq], cand.usage, -1)
            return list(removed), found
        finally:
            for cand in removed:
                self._charge(self.cqs[cand.cq], cand.usage, +1)

    def _preempt(self, preemptor: WL, cq: CQ, victims: list[WL]) -> None:
        path = cohorts.path_name(cq)
        for victim in victims:
            self.preemptions += 1
            vpath = cohorts.path_name(self.cqs[victim.cq])
            if victim.cq == cq.name:
                why, reason = "prioritization in the ClusterQueue", "InClusterQueue"
            elif victim.fair_victim:
                why, reason = "Fair Sharing within the cohort", "InCohortFairSharing"
            else:
                why, reason = "reclamation within the cohort", "InCohortReclamation"
            message = (
                f"Preempted to accommodate a workload (UID: {preemptor.uid}, JobUID: "
                f"{preemptor.job_uid or 'UNKNOWN'}) due to {why}; preemptor path: {path}; "
                f"preemptee path: {vpath}; preemptor: {preemptor.ns}/{preemptor.name}"
            )
            victim.fair_victim = False
            self.evicted_now.add(victim.key)
            self._evict(victim, "Preempted", message, preempted_reason=reason)

    # ------------------------------------------------------------------ transitions

    def _now(self) -> str:
        if self.clock is not None:
            return now_rfc3339(self.clock.timestamp())
        return now_rfc3339()

    def _admit(self, wl: WL, cq: CQ, assignment: list[dict[str, str]]) -> None:
        self._usage_changed()
        wl.state = ADMITTED
        wl.cq = cq.name
        wl.assignment = assignment
        wl.usage = self.usage_of(wl, assignment)
        wl.tas = list(wl.tas_plan)
        self._charge_tas(wl, +1)
        wl.message = ""
        self.seq += 1
        wl.admitted_seq = self.seq
        self._charge(cq, wl.usage, +1)
        cq.add_admitted(wl)
        if self.ledger is not None:
            lq_key = (wl.ns, wl.queue)
            self.ledger.hold(lq_key, wl.usage, +1)
            if cq.afs_mode:
                self.ledger.penalize(lq_key, wl.usage, self._timestamp())
        self.admissions += 1
        self.last_admission = time.monotonic()
        if not self.first_admission:
            self.first_admission = self.last_admission
        self.status_cqs.add(cq.name)
        self.status_lqs.add((wl.ns, wl.queue))
        now = self._now()

        def mutate(status: dict) -> None:
            # Built here, where a status is written (a replay writes none).
            admission = {
                "clusterQueue": cq.name,
                "podSetAssignments": [
                    {
                        "name": ps.name,
                        "flavors": dict(flavors),
                        "resourceUsage": {
                            res: _fmt(res, units)
                            for res, units in ps.total().items()
                            if res in flavors
                        },
                        "count": ps.count,
                        **(
                            {
                                "topologyAssignment": tas.topology_assignment(
                                    self.topologies[entry[0]], entry[1]
                                )
                            }
                            if entry and entry[0] in self.topologies
                            else {}
                        ),
                    }
                    for ps, flavors, entry in zip(
                        wl.podsets, assignment, wl.tas or [None] * len(wl.podsets), strict=True
                    )
                ],
            }
            status["admission"] = admission
            set_condition(
                status, "QuotaReserved", "True", "QuotaReserved",
                f"Quota reserved in ClusterQueue {cq.name}", now,
            )  # fmt: skip
            set_condition(status, "Admitted", "True", "Admitted", "The workload is admitted", now)
            if any(c.get("type") == "Evicted" for c in status.get("conditions", [])):
                set_condition(status, "Evicted", "False", "Admitted", "", now)
                set_condition(status, "Preempted", "False", "Admitted", "", now)

        self._write_status(wl, mutate)
        self._event(wl, "QuotaReserved", f"Quota reserved in ClusterQueue {cq.name}", now)
        self._event(wl, "Admitted", f"Admitted by ClusterQueue {cq.name}", now)
        if wl.job:
            self._start_job(wl)

    def _event(self, wl: WL, reason: str, message: str, now: str, type_: str = "Normal") -> None:
        """An Event on the Workload, as Kueue's controller records it."""
        obj = {
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": wl.name, "namespace": wl.ns, "uid": wl.uid},
        }  # fmt: skip
        events.record(self.store, obj=obj, reason=reason, message=message,
                      component="kueue-admission", now=now, type_=type_)  # fmt: skip

    def _release(self, wl: WL) -> None:
        self._usage_changed()
        if wl.tas:
            self._charge_tas(wl, -1)
            wl.tas = []
            self._capacity_changed()
        cq = self.cqs.get(wl.cq or "")
        if cq is not None and wl.key in cq.admitted:
            cq.discard_admitted(wl)
            self._charge(cq, wl.usage, -1)
            if self.ledger is not None:
                self.ledger.hold((wl.ns, wl.queue), wl.usage, -1)
            self.status_cqs.add(cq.name)
            self._unpark(self._cohort_of(cq), {flavor for flavor, _ in wl.usage})
        self.status_lqs.add((wl.ns, wl.queue))

    def _evict(
        self,
        wl: WL,
        reason: str,
        message: str,
        *,
        requeue: bool = True,
        preempted_reason: str | None = None,
    ) -> None:
        self._release(wl)
        wl.state = PENDING
        wl.assignment, wl.usage = [], {}
        now = self._now()

        def mutate(status: dict) -> None:
            status.pop("admission", None)
            set_condition(status, "Evicted", "True", reason, message, now)
            if preempted_reason:
                set_condition(status, "Preempted", "True", preempted_reason, message, now)
            set_condition(status, "QuotaReserved", "False", "Pending", message, now)
            set_condition(
                status, "Admitted", "False", "NoReservation", "The workload has no reservation",
                now,
            )  # fmt: skip
            if requeue:
                set_condition(status, "Requeued", "True", reason, message, now)

        wl.message = message
        self._write_status(wl, mutate)
        self._event(wl, preempted_reason and "Preempted" or reason, message, now, "Warning")
        if wl.job:
            self._stop_job(wl)
        if requeue:
            self._enqueue(wl)

    def _finish(self, wl: WL, succeeded: bool, message: str) -> None:
        if wl.state == ADMITTED:
            self._release(wl)
        elif wl.state == PENDING:
            self._dequeue(wl)
        wl.state = FINISHED
        now = self._now()
        reason = "Succeeded" if succeeded else "Failed"

        def mutate(status: dict) -> None:
            set_condition(status, "Finished", "True", reason, message, now)

        self._write_status(wl, mutate)

    def _set_pending_message(self, wl: WL, message: str) -> None:
        if wl.message == message:
            return
        wl.message = message
        now = self._now()

        def mutate(status: dict) -> None:
            set_condition(status, "QuotaReserved", "False", "Pending", message, now)

        self._write_status(wl, mutate)

    # ------------------------------------------------------------------ store writes

    def _write_status(self, wl: WL, mutate) -> None:
        rt = resources.WORKLOADS
        with self.store.lock:
            try:
                obj = self.store.get(rt, wl.ns, wl.name, copy=False)
            except NotFound:
                return
            if obj["metadata"].get("uid") != wl.uid:
                return
            status = deep_copy(obj.get("status") or {})
            mutate(status)
            self.store.update(rt, {**obj, "status": status}, subresource="status", check_rv=False)

    def _start_job(self, wl: WL) -> None:
        """Admitted: put each pod set's flavors (node labels, tolerations) into its template and
        unsuspend the job, as Kueue's job reconciler does."""
        integration = integrations.BY_KIND[wl.kind]
        with self.store.lock:
            try:
                job = self.store.get(integration.rt, wl.ns, wl.job)
            except NotFound:
                return
            podsets = integration.podsets(job)
            for (_, _, template), flavors in zip(podsets, wl.assignment, strict=False):
                pod_spec = template.setdefault("spec", {})
                for flavor in sorted(set(flavors.values())):
                    fspec = (self.flavors.get(flavor) or {}).get("spec") or {}
                    if fspec.get("nodeLabels"):
                        pod_spec["nodeSelector"] = {
                            **(pod_spec.get("nodeSelector") or {}),
                            **fspec["nodeLabels"],
                        }
                    tolerations = pod_spec.setdefault("tolerations", [])
                    for tol in fspec.get("tolerations") or []:
                        if tol not in tolerations:
                            tolerations.append(dict(tol))
                    if not tolerations:
                        pod_spec.pop("tolerations")
            integration.set_suspend(job, False)
            annotations = job["metadata"].setdefault("annotations", {})
            annotations["kueue.x-k8s.io/workload"] = wl.name
            self.store.update(integration.rt, job, check_rv=False, manager=KUEUE_MANAGER)

    def _stop_job(self, wl: WL) -> None:
        """Not (or no longer) admitted: suspend the job and restore its templates' own node
        selectors and tolerations."""
        integration = integrations.BY_KIND[wl.kind]
        with self.store.lock:
            try:
                job = self.store.get(integration.rt, wl.ns, wl.job)
            except NotFound:
                return
            if integration.finished(job) or integration.suspended(job):
                return
            integration.set_suspend(job, True)
            for (_, _, template), ps in zip(integration.podsets(job), wl.podsets, strict=False):
                pod_spec = template.setdefault("spec", {})
                for key in ("nodeSelector", "tolerations"):
                    if ps.spec.get(key):
                        pod_spec[key] = deep_copy(ps.spec[key])
                    else:
                        pod_spec.pop(key, None)
            self.store.update(integration.rt, job, check_rv=False, manager=KUEUE_MANAGER)

    # ------------------------------------------------------------------ job integration

    def sync_jobs(self) -> None:
        """Create Workloads for queued Jobs, finish them, keep unadmitted Jobs suspended."""
        todo, self.jobs_todo = self.jobs_todo, {}
        for (ns, name, kind), job in todo.items():
            integration = integrations.BY_KIND[kind]
            if job is not None:
                # The event may predate our own writes: decide on the stored object.
                try:
                    job = self.store.get(integration.rt, ns, name, copy=False)
                except NotFound:
                    job = None
            try:
                self._sync_job(ns, name, integration, job)
            except Exception:  # one bad object must not stop the controller
                log.exception("kueue: syncing %s %s/%s failed", kind, ns, name)

    def _sync_job(self, ns: str, name: str, integration, job: dict | None) -> None:
        key = self.by_job.get((ns, name, integration.kind))
        wl = self.workloads.get(key) if key else None
        if job is None:
            if wl is not None:
                try:
                    self.store.delete(resources.WORKLOADS, wl.ns, wl.name)
                except NotFound:
                    self._forget(wl)
            return
        if wl is not None and wl.job_uid and wl.job_uid != job["metadata"].get("uid"):
            # The Job was recreated under the same name: its old Workload is stale.
            with_ignore(self.store.delete, resources.WORKLOADS, wl.ns, wl.name)
            self._forget(wl)
            wl = None
        if wl is None:
            if (job.get("metadata", {}).get("labels") or {}).get(QUEUE_LABEL) is None:
                return
            if integration.finished(job):
                return
            wl = self._create_workload(job, integration)
            if wl is None:
                return
        finished = integration.finished(job)
        if finished and wl.state != FINISHED:
            succeeded = finished == "Complete"
            cond = condition(job, integration.done[0 if succeeded else 1]) or {}
            message = (
                "Job finished successfully" if succeeded else cond.get("message") or "Job failed"
            )
            self._finish(wl, succeeded, message)
        elif not finished and wl.state in (PENDING, INACTIVE) and not integration.suspended(job):
            self._stop_job(wl)
        elif not finished and wl.state == ADMITTED and integration.suspended(job):
            # Kueue owns suspension of the Jobs it manages: an admitted Job runs.
            self._start_job(wl)

    def _create_workload(self, job: dict, integration) -> WL | None:
        meta = job["metadata"]
        labels = meta.get("labels") or {}
        podsets = []
        for ps_name, count, template in integration.podsets(deep_copy(job)):
            podset: dict[str, Any] = {"name": ps_name, "count": max(count, 0), "template": template}
            topology = tas.topology_request(template)
            if topology and integration is integrations.BATCH_JOB:
                podset["topologyRequest"] = topology
            podsets.append(podset)
        first = podsets[0]["template"] if podsets else {}
        priority, ref = self._priority(labels, first.get("spec") or {})
        wl_spec: dict[str, Any] = {
            "queueName": labels.get(QUEUE_LABEL, ""),
            "podSets": podsets,
            "priority": priority,
            "active": True,
        }
        if ref:
            wl_spec["priorityClassRef"] = ref
        obj = {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {
                "name": workload_name(meta["name"], integration.kind, integration.rt.group),
                "namespace": meta["namespace"],
                "labels": {JOB_UID_LABEL: meta.get("uid", "")},
                "ownerReferences": [
                    {
                        "apiVersion": integration.rt.api_version,
                        "kind": integration.kind,
                        "name": meta["name"],
                        "uid": meta.get("uid", ""),
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": wl_spec,
        }
        try:
            created = self.store.create(resources.WORKLOADS, obj)
        except Exception as exc:  # AlreadyExists from a previous life, namespace gone, ...
            try:
                created = self.store.get(
                    resources.WORKLOADS, meta["namespace"], obj["metadata"]["name"]
                )
            except NotFound:
                log.warning("kueue: cannot create workload for job %s: %s", meta["name"], exc)
                return None
        existing = self.workloads.get(
            (created["metadata"]["namespace"], created["metadata"]["name"])
        )
        if existing is not None and existing.uid == created["metadata"]["uid"]:
            return existing
        return self._adopt(created)

    def _priority(self, labels: dict, pod_spec: dict) -> tuple[int, dict | None]:
        wpc = labels.get(PRIORITY_LABEL)
        if wpc and wpc in self.wpcs:
            ref = {"group": KUEUE_GROUP, "kind": "WorkloadPriorityClass", "name": wpc}
            return self.wpcs[wpc], ref
        pc = pod_spec.get("priorityClassName")
        if pc and pc in self.pcs:
            ref = {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": pc}
            return self.pcs[pc], ref
        return 0, None

    def job_admitted(self, ns: str, name: str) -> bool:
        """Whether a Kueue-managed Job may run (used by the Job controller)."""
        key = self.by_job.get((ns, name, "Job"))
        wl = self.workloads.get(key) if key else None
        return wl is not None and wl.state in (ADMITTED, FINISHED)

    # ------------------------------------------------------------------ stop policies

    def drain(self) -> None:
        """Evict admitted workloads of queues with stopPolicy HoldAndDrain."""
        for cq in self.cqs.values():
            if cq.stop == "HoldAndDrain" and cq.admitted:
                for key in sorted(cq.admitted):
                    self._evict(
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
                    self._evict(wl, "LocalQueueStopped", "The LocalQueue is stopped")

    # ------------------------------------------------------------------ queue status

    def write_statuses(self) -> None:
        """Write ClusterQueue and LocalQueue status for those that changed."""
        cqs, self.status_cqs = self.status_cqs, set()
        for name in sorted(cqs):
            try:
                self._write_cq_status(name)
            except Exception:
                log.exception("kueue: clusterqueue %s status failed", name)
        if self.fair_sharing:
            # A queue's usage moves the shares of the Cohorts above it.
            names, self.status_cohorts = self.status_cohorts, set()
            for name in cqs:
                cq = self.cqs.get(name)
                if cq is not None and cq.parent is not None:
                    names.update(co.name for co in cq.parent.path())
            for name in sorted(names):
                try:
                    self._write_cohort_status(name)
                except Exception:
                    log.exception("kueue: cohort %s status failed", name)
        lqs, self.status_lqs = self.status_lqs, set()
        for key in sorted(lqs):
            if key in self.lqs:
                try:
                    self._write_lq_status(key)
                except Exception:
                    log.exception("kueue: localqueue %s/%s status failed", *key)

    def _pending_count(self, cq: CQ) -> int:
        return len(cq.active) + len(cq.parked)

    def _write_cq_status(self, name: str) -> None:
        cq = self.cqs.get(name)
        if cq is None or name not in self.cq_objs:
            return
        now = self._now()
        reservation = []
        for _, flavors in cq.groups:
            for flavor, fres in flavors:
                reservation.append(
                    {
                        "name": flavor,
                        "resources": [
                            {
                                "name": res,
                                "total": _fmt(res, cq.usage[(flavor, res)]),
                                "borrowed": _fmt(res, max(0, cq.usage[(flavor, res)] - q.nominal)),
                            }
                            for res, q in fres.items()
                        ],
                    }
                )
        if cq.missing_flavors:
            active = (
                "False",
                "FlavorNotFound",
                "Can't admit new workloads: references missing ResourceFlavor(s): "
                + ", ".join(cq.missing_flavors)
                + ".",
            )
        elif cq.in_cycle:
            active = (
                "False", "HasCycle",
                f"Can't admit new workloads: the parents of Cohort {cq.cohort} form a cycle",
            )  # fmt: skip
        elif cq.stop != "None":
            active = ("False", "Stopped", "Can't admit new workloads; clusterQueue is stopped")
        else:
            active = ("True", "Ready", "Can admit new workloads")
        with self.store.lock:
            try:
                obj = self.store.get(resources.CLUSTER_QUEUES, None, name, copy=False)
            except NotFound:
                return
            status = deep_copy(obj.get("status") or {})
            obj = {**obj, "status": status}
            status["pendingWorkloads"] = self._pending_count(cq)
            status["reservingWorkloads"] = len(cq.admitted)
            status["admittedWorkloads"] = len(cq.admitted)
            status["flavorsReservation"] = reservation
            status["flavorsUsage"] = deep_copy(reservation)
            if self.fair_sharing:
                status["fairSharing"] = {"weightedShare": self.share(cq).weighted}
            set_condition(status, "Active", *active, now, obj["metadata"].get("generation", 1))
            self.store.update(resources.CLUSTER_QUEUES, obj, subresource="status", check_rv=False)

    def _write_cohort_status(self, name: str) -> None:
        """A Cohort object's `fairSharing.weightedShare` (its share in its parent)."""
        co = self.cohorts.get(name)
        if co is None or name not in self.cohort_objs:
            return
        value = {"weightedShare": self.share(co).weighted}
        with self.store.lock:
            try:
                obj = self.store.get(resources.COHORTS, None, name, copy=False)
            except NotFound:
                return
            if (obj.get("status") or {}).get("fairSharing") == value:
                return
            status = {**deep_copy(obj.get("status") or {}), "fairSharing": value}
            self.store.update(
                resources.COHORTS, {**obj, "status": status}, subresource="status",
                check_rv=False,
            )  # fmt: skip

    def _write_lq_status(self, key: tuple[str, str]) -> None:
        ns, name = key
        lq = self.lqs[key]
        spec = lq.get("spec") or {}
        cq = self.cqs.get(spec.get("clusterQueue", ""))
        pending = reserving = 0
        usage: dict[tuple[str, str], int] = defaultdict(int)
        if cq is not None:
            for _, k in cq.active:
                w = self.workloads[k]
                pending += w.ns == ns and w.queue == name
            for k in cq.parked:
                w = self.workloads[k]
                pending += w.ns == ns and w.queue == name
            for k in cq.admitted:
                w = self.workloads[k]
                if w.ns == ns and w.queue == name:
                    reserving += 1
                    for fr, units in w.usage.items():
                        usage[fr] += units
        if cq is None:
            active = (
                "False",
                "ClusterQueueDoesNotExist",
                "Can't submit new workloads to clusterQueue",
            )
        elif (spec.get("stopPolicy") or "None") != "None":
            active = ("False", "Stopped", "LocalQueue is stopped")
        elif not cq.is_active:
            active = (
                "False",
                "ClusterQueueIsInactive",
                "Can't submit new workloads to clusterQueue",
            )
        else:
            active = ("True", "Ready", "Can submit new workloads to localQueue")
        flavors: dict[str, list[dict]] = defaultdict(list)
        if cq is not None:
            for flavor, res in cq.quotas:
                flavors[flavor].append({"name": res, "total": _fmt(res, usage[(flavor, res)])})
        usage_list = [{"name": f, "resources": rs} for f, rs in flavors.items()]
        with self.store.lock:
            try:
                obj = self.store.get(resources.LOCAL_QUEUES, ns, name, copy=False)
            except NotFound:
                return
            status = deep_copy(obj.get("status") or {})
            obj = {**obj, "status": status}
            status["pendingWorkloads"] = pending
            status["reservingWorkloads"] = reserving
            status["admittedWorkloads"] = reserving
            status["flavorsReservation"] = usage_list
            status["flavorsUsage"] = deep_copy(usage_list)
            if self.ledger is not None and cq is not None and cq.afs_mode:
                status["fairSharing"] = {
                    "weightedShare": 0,
                    "admissionFairSharingStatus": self.ledger.status(key, now_rfc3339),
                }
            set_condition(
                status, "Active", *active, self._now(), obj["metadata"].get("generation", 1)
            )
            self.store.update(resources.LOCAL_QUEUES, obj, subresource="status", check_rv=False)

    # ------------------------------------------------------------------ visibility

    def pending_in_cq(self, cq_name: str) -> list[WL]:
        cq = self.cqs.get(cq_name)
        if cq is None:
            return []
        wls = [self.workloads[k] for _, k in cq.active]
        wls.extend(self.workloads[k] for k in cq.parked)
        if self._afs_on(cq):
            return sorted(wls, key=lambda w: (self.lq_usage((w.ns, w.queue)), w.sort_key()))
        return sorted(wls, key=WL.sort_key)


class _Targets:
    """The ClusterQueues fair-sharing preemption takes from, in Kueue's order (its
    TargetClusterQueueOrdering): iterating yields, again and again until none is left, the queue
    found by walking down from the root, at each Cohort to the child Cohort or ClusterQueue
    with the highest share (a Cohort when it is no lower; equal queues by their first
    candidates), passing over, for good, queues that borrow nothing (other than the
    preemptor's) or have no candidate left, and Cohorts that borrow nothing unless the
    preemptor is below them."""

    def __init__(self, engine: KueueEngine, cq: CQ, candidates: list[WL]):
        self.engine, self.cq = engine, cq
        self.by_cq: dict[str, list[WL]] = defaultdict(list)
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

    def has(self, cq: CQ) -> bool:
        return bool(self.by_cq.get(cq.name))

    def pop(self, cq: CQ) -> WL:
        return self.by_cq[cq.name].pop(0)

    def drop(self, cq: CQ) -> None:
        self.pruned_cqs.add(cq.name)

    def _next(self, cohort: cohorts.Cohort) -> CQ | None:
        best_cq, best_cq_share = None, cohorts.BELOW_ANY
        for cq in cohort.child_cqs:
            if cq.name in self.pruned_cqs:
                continue
            share = cohorts.share(cq)
            if (not share.borrowing and cq is not self.cq) or not self.has(cq):
                self.pruned_cqs.add(cq.name)
            elif share.key == best_cq_share.key:
                mine, theirs = self.by_cq[cq.name][0], self.by_cq[best_cq.name][0]
                if self.engine._candidate_cmp(mine, theirs, self.cq) < 0:
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

    def shares(self, target: CQ) -> tuple[cohorts.Share, cohorts.Share]:
        """The preemptor's and the target's shares where their paths meet: each of the two
        children of their lowest common Cohort that they are under (or are)."""
        lca = next(co for co in target.parent.path() if co.name in self.ancestors)

        def below(cq: CQ):
            node = cq
            while node.parent is not lca:
                node = node.parent
            return node

        return cohorts.share(below(self.cq)), cohorts.share(below(target))


def _gpu_first(item: tuple[str, int]) -> tuple[int, str]:
    return (0 if item[0] == GPU else 1, item[0])


def _epoch(text: str) -> float | None:
    stamp = parse_time(text)
    return stamp.timestamp() if stamp is not None else None


def _fmt(res: str, units: int) -> str:
    return format_units(res, units)


def with_ignore(fn, *args) -> None:
    with contextlib.suppress(NotFound, Conflict):
        fn(*args)


def engine_for(store) -> KueueEngine | None:
    """The engine running on a store, if controllers were started on it."""
    return _ENGINES.get(store)


def pending_workloads(
    store,
    *,
    cluster_queue: str | None = None,
    namespace: str | None = None,
    local_queue: str | None = None,
    limit: int = 1000,
    offset: int = 0,
) -> dict:
    """Kueue visibility API PendingWorkloadsSummary for a ClusterQueue or a LocalQueue."""
    engine = engine_for(store)
    items: list[dict] = []
    if engine is not None:
        with engine.lock:
            items = _pending_items(engine, cluster_queue, namespace, local_queue)
    return {
        "kind": "PendingWorkloadsSummary",
        "apiVersion": VISIBILITY_API_VERSION,
        "metadata": {"creationTimestamp": None},
        "items": items[offset : offset + limit] if limit else items[offset:],
    }


def _pending_items(
    engine: KueueEngine, cluster_queue: str | None, namespace: str | None, local_queue: str | None
) -> list[dict]:
    if cluster_queue is None and local_queue is not None:
        lq = engine.lqs.get((namespace or "", local_queue))
        if lq is None:
            return []
        cluster_queue = (lq.get("spec") or {}).get("clusterQueue")
    if cluster_queue is None:
        return []
    items = []
    per_lq: dict[tuple[str, str], int] = defaultdict(int)
    for position, wl in enumerate(engine.pending_in_cq(cluster_queue)):
        lq_key = (wl.ns, wl.queue)
        lq_position = per_lq[lq_key]
        per_lq[lq_key] += 1
        if local_queue is not None and lq_key != (namespace, local_queue):
            continue
        owner = (
            [
                {
                    "apiVersion": integrations.BY_KIND[wl.kind].rt.api_version,
                    "kind": wl.kind,
                    "name": wl.job,
                    "uid": wl.job_uid,
                }
            ]  # fmt: skip
            if wl.job
            else []
        )
        items.append(
            {
                "metadata": {
                    "name": wl.name,
                    "namespace": wl.ns,
                    "creationTimestamp": wl.created,
                    "ownerReferences": owner,
                },
                "priority": wl.priority,
                "localQueueName": wl.queue,
                "positionInClusterQueue": position,
                "positionInLocalQueue": lq_position,
            }
        )
    return items
