"""The model's types: a ClusterQueue's quota (Quota) and the queue itself (CQ), a Workload (WL)
and its pod sets (PodSet), and the states a Workload goes through."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from kueuemodel import afs, cohorts
from kueuemodel.resources import pod_requests, to_units

PENDING, ADMITTED, FINISHED, INACTIVE = "pending", "admitted", "finished", "inactive"


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
    # Why each flavor cannot take it ("" when it can), for the model's flavor generation.
    mismatch: dict = field(default_factory=dict, repr=False, compare=False)

    def total(self) -> dict[str, int]:
        return {r: v * self.count for r, v in self.per_pod.items()}


@dataclass
class WL:
    """The model's view of one Workload."""

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
    kind: str = "Job"  # the owner's kind
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


def podsets_of(spec: dict) -> list[PodSet]:
    """A Workload's `spec.podSets` as the model counts them (each pod's requests)."""
    return [
        PodSet(
            ps.get("name", "main"),
            int(ps.get("count", 1)),
            pod_requests((ps.get("template") or {}).get("spec") or {}),
            (ps.get("template") or {}).get("spec") or {},
            ps.get("topologyRequest") or None,
        )
        for ps in spec.get("podSets") or []
    ]


def condition(obj: dict, ctype: str) -> dict | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype:
            return cond
    return None


def is_true(obj: dict, ctype: str) -> bool:
    cond = condition(obj, ctype)
    return bool(cond and cond.get("status") == "True")


class CQ:
    """The model's view of one ClusterQueue."""

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
        # Its place in a cohort tree (kueuemodel.cohorts): the Cohort it belongs to (set by the
        # model's rebuild), and per (flavor, resource) its nominal quota, the part it never
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
        # The pending workloads as the one-by-one strategy keeps them (kueuemodel.queue): in
        # queue order, and set aside until quota is released.
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
