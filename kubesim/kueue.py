"""kubesim's Kueue controller: the adaptor between the store and kueuemodel's rules.

The rules (quota and cohorts, flavor assignment, preemption, ordering, fair sharing, topology)
are kueuemodel's Model; this controller feeds it the store's objects, makes Workloads for the
Jobs queued in Kueue's LocalQueues, and writes what the model decides back: Workload
conditions and admissions, events, the Jobs suspended or started, topology gates lifted, the
queues' statuses and the visibility API's pending positions.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import threading
import time
import weakref
from collections import Counter, defaultdict
from typing import Any

from kubesim import events, integrations, resources
from kubesim.clock import parse_time
from kubesim.store import Conflict, NotFound, deep_copy, now_rfc3339
from kueuemodel import afs, tas
from kueuemodel.model import Listener, Model
from kueuemodel.resources import format_units
from kueuemodel.types import ADMITTED, CQ, FINISHED, INACTIVE, PENDING, WL, condition

log = logging.getLogger(__name__)

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
KUEUE_GROUP = resources.KUEUE
VISIBILITY_API_VERSION = "visibility.kueue.x-k8s.io/v1beta1"


def _job_controller(integration) -> str:
    """The component Kueue records a job's events as (e.g. `batch/job-kueue-controller`)."""
    return f"{integration.rt.group}/{integration.kind.lower()}-kueue-controller"


PODSET_LABEL = "kueue.x-k8s.io/podset"
WORKLOAD_ANNOTATION = "kueue.x-k8s.io/workload"
# The label that numbers a pod set's pods, per integration (Kueue's podIndexLabel).
POD_INDEX_LABELS = {
    "Job": tas.INDEX_LABEL,
    "JobSet": tas.INDEX_LABEL,
    "PyTorchJob": "training.kubeflow.org/replica-index",
}
KUEUE_MANAGER = "kueue"  # field manager of our writes to Jobs, as in a real cluster

_ENGINES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


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


def _model_attribute(name: str) -> property:
    """A setting of the model, read and written through the controller."""

    def get(self):
        return getattr(self.model, name)

    def put(self, value) -> None:
        setattr(self.model, name, value)

    return property(get, put)


class KueueEngine(Listener):
    """Kueue's job integration, queue status and visibility over kueuemodel's Model, which
    admits, preempts and orders; the controller is the model's listener."""

    # Kueue's configuration and the cluster's objects as the model holds them.
    fair_sharing = _model_attribute("fair_sharing")
    flavors = _model_attribute("flavors")
    cohort_objs = _model_attribute("cohort_objs")
    cq_objs = _model_attribute("cq_objs")
    lqs = _model_attribute("lqs")
    # The model's state and arithmetic, read through the controller (tests and benchmarks look
    # at them).
    _READ_THROUGH = frozenset(
        ("cqs", "cohorts", "workloads", "admissions", "preemptions", "available", "capacity",
         "assign", "share", "rebuild")
    )  # fmt: skip

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
        # Kueue's `admissionFairSharing` configuration (KUBESIM_ADMISSION_FAIR_SHARING, its JSON,
        # or the server's --admission-fair-sharing; False: none): LocalQueues remember usage.
        if admission_fair_sharing is None:
            text = os.environ.get("KUBESIM_ADMISSION_FAIR_SHARING", "")
            admission_fair_sharing = afs.AfsConfig.from_text(text)
        self.model = Model(
            clock=clock, fair_sharing=fair_sharing,
            admission_fair_sharing=admission_fair_sharing or None, listener=self,
        )  # fmt: skip
        self.wpcs: dict[str, int] = {}
        self.pcs: dict[str, int] = {}
        # (namespace, owner name, owner kind) -> workload key
        self.by_job: dict[tuple[str, str, str], tuple[str, str]] = {}
        self.jobs_todo: dict[tuple[str, str, str], dict | None] = {}
        # The pods of TAS pod sets by (namespace, workload, pod set): pod name -> [gated, node
        # selector, index].
        self.tas_pods: dict[tuple[str, str, str], dict[str, list]] = {}
        self.first_admission = 0.0  # time.monotonic() of the first and latest admission
        self.last_admission = 0.0
        self._queued_since: dict[tuple[str, str], Any] = {}  # evicted workload -> its eviction
        # Held by the controller thread while it changes the model; readers (visibility) take it.
        self.lock = threading.RLock()
        _ENGINES[store] = self

    def __getattr__(self, name: str):
        if name in KueueEngine._READ_THROUGH:
            return getattr(self.model, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _charge(self, cq: CQ, usage: dict[tuple[str, str], int], sign: int) -> None:
        """Move a ClusterQueue's usage by hand (quota tests)."""
        self.model.charge(cq, usage, sign)

    # ------------------------------------------------------------------ events

    def on_event(self, etype: str, rt, obj: dict) -> None:
        """Update the model from one store event (called from the controller thread)."""
        model = self.model
        plural, group = rt.plural, rt.group
        meta = obj.get("metadata") or {}
        name = meta.get("name", "")
        deleted = etype == "DELETED"
        value = None if deleted else obj
        integration = integrations.for_resource(rt)
        if integration is not None:
            key = (meta.get("namespace"), name, integration.kind)
            if (meta.get("labels") or {}).get(QUEUE_LABEL) or key in self.by_job:
                self.jobs_todo[key] = value
            return
        if group == KUEUE_GROUP:
            if plural == "workloads":
                self._workload_event(etype, obj)
            elif plural == "resourceflavors":
                model.set_flavor(name, value)
            elif plural == "cohorts":
                model.set_cohort(name, value)
            elif plural == "clusterqueues":
                model.set_cluster_queue(name, value)
            elif plural == "localqueues":
                key = (meta.get("namespace"), name)
                if model.ledger is not None:
                    if deleted:
                        model.ledger.forget(key)
                    else:
                        model.ledger.seed(key, obj.get("status"), model.timestamp(), _epoch)
                model.set_local_queue(key, value)
            elif plural == "workloadpriorityclasses":
                _put(self.wpcs, name, int(obj.get("value", 0)), deleted)
            elif plural == "topologies":
                model.set_topology(name, value)
        elif group == resources.SCHEDULING and plural == "priorityclasses":
            _put(self.pcs, name, int(obj.get("value", 0)), deleted)
        elif group == "" and plural == "nodes":
            model.node_event(etype, obj)
        elif group == "" and plural == "pods":
            self._pod_event(etype, obj)
        elif group == "" and plural == "namespaces":
            labels = dict(meta.get("labels") or {})
            labels.setdefault("kubernetes.io/metadata.name", name)
            model.set_namespace(name, None if deleted else labels)

    def _pod_event(self, etype: str, obj: dict) -> None:
        self.model.pod_event(etype, obj)
        meta = obj["metadata"]
        if (meta.get("labels") or {}).get(tas.TAS_LABEL) != "true":
            return
        labels = meta.get("labels") or {}
        workload = (meta.get("annotations") or {}).get(WORKLOAD_ANNOTATION)
        if workload is None:
            return
        key = (meta.get("namespace", ""), workload, labels.get(PODSET_LABEL, "main"))
        pods = self.tas_pods.setdefault(key, {})
        spec = obj.get("spec") or {}
        if etype == "DELETED" or (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            pods.pop(meta["name"], None)
            if not pods:
                self.tas_pods.pop(key, None)
            return
        gated = any(g.get("name") == tas.TOPOLOGY_GATE for g in spec.get("schedulingGates") or [])
        index = next((labels[k] for k in POD_INDEX_LABELS.values() if k in labels), "")
        pods[meta["name"]] = [gated, dict(spec.get("nodeSelector") or {}), index]

    def _workload_event(self, etype: str, obj: dict) -> None:
        meta = obj["metadata"]
        key = (meta.get("namespace", ""), meta["name"])
        wl = self.model.workloads.get(key)
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
        self.model.update_workload(wl, obj.get("spec") or {})

    def _adopt(self, obj: dict) -> WL:
        """Add a Workload object (created by us, a user, or restored from a state file)."""
        owner = next(
            (r for r in obj["metadata"].get("ownerReferences") or [] if integrations.for_owner(r)),
            None,
        )
        wl = self.model.add_workload(obj, owner)
        if wl.job:
            self.by_job[(wl.ns, wl.job, wl.kind)] = wl.key
        return wl

    def _forget(self, wl: WL) -> None:
        self.model.forget(wl)
        if wl.job and self.by_job.get((wl.ns, wl.job, wl.kind)) == wl.key:
            del self.by_job[(wl.ns, wl.job, wl.kind)]

    # ------------------------------------------------------------------ scheduling

    def schedule(self) -> int:
        """Admit what fits; returns the number of admissions."""
        model = self.model
        if model.rebuild_needed:
            model.rebuild()
            model.drain()
        if self.tas_pods:
            self._ungate()
        return model.schedule()

    def _ungate(self) -> None:
        """Kueue's topology ungater: give each gated pod of an admitted TAS workload a node
        selector for a domain its assignment still has room in, and lift the gate."""
        for (ns, workload, podset), pods in list(self.tas_pods.items()):
            gated = sorted(
                (name for name, v in pods.items() if v[0]),
                key=lambda name: (int(pods[name][2]) if pods[name][2].isdigit() else 0, name),
            )
            if not gated:
                continue
            wl = self.model.workloads.get((ns, workload))
            if wl is None or wl.state != ADMITTED or not wl.tas:
                continue
            index = next((i for i, ps in enumerate(wl.podsets) if ps.name == podset), None)
            if index is None or index >= len(wl.tas) or not wl.tas[index]:
                continue
            topo, plan = wl.tas[index]
            levels = self.model.topologies.get(topo)
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
            return self.model.nodes.node_leaf(levels, selector.get(tas.HOSTNAME, ""))
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

    # ------------------------------------------------------------------ the model's decisions

    def _now(self) -> str:
        if self.clock is not None:
            return now_rfc3339(self.clock.timestamp())
        return now_rfc3339()

    def admitted(self, wl: WL, cq: CQ) -> None:
        self.last_admission = time.monotonic()
        if not self.first_admission:
            self.first_admission = self.last_admission
        now = self._now()
        topologies = self.model.topologies

        def mutate(status: dict) -> None:
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
                                    topologies[entry[0]], entry[1]
                                )
                            }
                            if entry and entry[0] in topologies
                            else {}
                        ),
                    }
                    for ps, flavors, entry in zip(
                        wl.podsets,
                        wl.assignment,
                        wl.tas or [None] * len(wl.podsets),
                        strict=True,
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
        # Kueue counts the wait from the Workload's creation, or from its last eviction.
        since = self._queued_since.pop(wl.key, None) or parse_time(wl.created)
        waited = max(0.0, (parse_time(now) - since).total_seconds()) if since else 0.0
        self._event(wl, "QuotaReserved", f"Quota reserved in ClusterQueue {cq.name}, wait time "
                    f"since queued was {waited:.0f}s", now)  # fmt: skip
        self._event(wl, "Admitted", f"Admitted by ClusterQueue {cq.name}, wait time since "
                    "reservation was 0s", now)  # fmt: skip
        if wl.job:
            self._start_job(wl)

    def evicted(
        self, wl: WL, reason: str, message: str, *, requeue: bool, preempted_reason: str | None
    ) -> None:
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
            # Every eviction is counted by reason and underlying cause, as Kueue does: a reader
            # learns of a preemption even once the workload is admitted again.
            evictions = status.setdefault("schedulingStats", {}).setdefault("evictions", [])
            cause = preempted_reason or ""
            for entry in evictions:
                if entry.get("reason") == reason and entry.get("underlyingCause", "") == cause:
                    entry["count"] = int(entry.get("count") or 0) + 1
                    break
            else:
                evictions.append({"reason": reason, "underlyingCause": cause, "count": 1})

        self._write_status(wl, mutate)
        self._queued_since[wl.key] = parse_time(now)
        self._event(wl, preempted_reason and "Preempted" or reason, message, now, "Warning")
        if wl.job:
            self._stop_job(wl)

    def finished(self, wl: WL, succeeded: bool, message: str) -> None:
        now = self._now()
        reason = "Succeeded" if succeeded else "Failed"

        def mutate(status: dict) -> None:
            set_condition(status, "Finished", "True", reason, message, now)

        self._write_status(wl, mutate)

    def pending(self, wl: WL, message: str) -> None:
        now = self._now()

        def mutate(status: dict) -> None:
            set_condition(status, "QuotaReserved", "False", "Pending", message, now)

        self._write_status(wl, mutate)
        # Kueue's scheduler records each failed attempt as an event (deduplicated by count).
        self._event(wl, "Pending", message, now)

    def _event(self, wl: WL, reason: str, message: str, now: str, type_: str = "Normal") -> None:
        """An Event on the Workload, as Kueue's controller records it."""
        obj = {
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": wl.name, "namespace": wl.ns, "uid": wl.uid},
        }  # fmt: skip
        events.record(self.store, obj=obj, reason=reason, message=message,
                      component="kueue-admission", now=now, type_=type_)  # fmt: skip

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
            placements = wl.tas or [None] * len(podsets)
            for (ps_name, _, template), flavors, placed in zip(
                podsets, wl.assignment, placements, strict=False
            ):
                pod_spec = template.setdefault("spec", {})
                if placed:
                    # Kueue gates a TAS pod set's pods until its ungater gives each a domain;
                    # the labels and annotation say which workload and pod set they are of.
                    tmeta = template.setdefault("metadata", {})
                    labels = tmeta.setdefault("labels", {})
                    tas.gate_pod(pod_spec, labels)
                    labels[PODSET_LABEL] = ps_name
                    tmeta.setdefault("annotations", {})[WORKLOAD_ANNOTATION] = wl.name
                for flavor in sorted(set(flavors.values())):
                    fspec = (self.model.flavors.get(flavor) or {}).get("spec") or {}
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
        message = f"Admitted by clusterQueue {wl.cq}"
        events.record(self.store, obj=job, reason="Started", message=message,
                      component=_job_controller(integration), now=self._now())  # fmt: skip

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
        wl = self.model.workloads.get(key) if key else None
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
        self._follow_priority_class(wl, job)
        finished = integration.finished(job)
        if finished and wl.state != FINISHED:
            succeeded = finished == "Complete"
            cond = condition(job, integration.done[0 if succeeded else 1]) or {}
            message = (
                "Job finished successfully" if succeeded else cond.get("message") or "Job failed"
            )
            self.model.finish(wl, succeeded, message)
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
            if topology:
                # Kueue's TAS applies to the pod sets of every integration; each names the
                # label that numbers its pods.
                topology["podIndexLabel"] = POD_INDEX_LABELS.get(integration.kind, tas.INDEX_LABEL)
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
            message = f"Created Workload: {meta['namespace']}/{obj['metadata']['name']}"
            events.record(self.store, obj=job, reason="CreatedWorkload", message=message,
                          component=_job_controller(integration), now=self._now())  # fmt: skip
        except Exception as exc:  # AlreadyExists from a previous life, namespace gone, ...
            try:
                created = self.store.get(
                    resources.WORKLOADS, meta["namespace"], obj["metadata"]["name"]
                )
            except NotFound:
                log.warning("kueue: cannot create workload for job %s: %s", meta["name"], exc)
                return None
        existing = self.model.workloads.get(
            (created["metadata"]["namespace"], created["metadata"]["name"])
        )
        if existing is not None and existing.uid == created["metadata"]["uid"]:
            return existing
        return self._adopt(created)

    def _follow_priority_class(self, wl: WL, job: dict) -> None:
        """Kueue (0.15 and later, kueue#7289) passes a change of the job's priority-class label
        to its Workload, quota reserved or not: the class's name and value, once the class
        exists. (A changed value of the same class is not passed on, kueue#8322.)"""
        wpc = (job["metadata"].get("labels") or {}).get(PRIORITY_LABEL)
        if not wpc or wpc not in self.wpcs or wl.state == FINISHED:
            return
        try:
            stored = self.store.get(resources.WORKLOADS, wl.ns, wl.name, copy=False)
        except NotFound:
            return
        ref = (stored.get("spec") or {}).get("priorityClassRef") or {}
        if ref.get("kind", "WorkloadPriorityClass") != "WorkloadPriorityClass" or (
            ref.get("name") == wpc
        ):
            return
        if not ref:  # Kueue does not add a class to a Workload that had none (kueue#8320)
            return
        stored = deep_copy(stored)
        spec = stored["spec"]
        spec["priorityClassRef"] = {"group": KUEUE_GROUP, "kind": "WorkloadPriorityClass",
                                    "name": wpc}  # fmt: skip
        spec["priority"] = self.wpcs[wpc]
        self.store.update(resources.WORKLOADS, stored, check_rv=False, manager=KUEUE_MANAGER)

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
        wl = self.model.workloads.get(key) if key else None
        return wl is not None and wl.state in (ADMITTED, FINISHED)

    # ------------------------------------------------------------------ queue status

    def write_statuses(self) -> None:
        """Write ClusterQueue and LocalQueue status for those that changed."""
        model = self.model
        cqs, model.status_cqs = model.status_cqs, set()
        for name in sorted(cqs):
            try:
                self._write_cq_status(name)
            except Exception:
                log.exception("kueue: clusterqueue %s status failed", name)
        if model.fair_sharing:
            # A queue's usage moves the shares of the Cohorts above it.
            names, model.status_cohorts = model.status_cohorts, set()
            for name in cqs:
                cq = model.cqs.get(name)
                if cq is not None and cq.parent is not None:
                    names.update(co.name for co in cq.parent.path())
            for name in sorted(names):
                try:
                    self._write_cohort_status(name)
                except Exception:
                    log.exception("kueue: cohort %s status failed", name)
        lqs, model.status_lqs = model.status_lqs, set()
        for key in sorted(lqs):
            if key in model.lqs:
                try:
                    self._write_lq_status(key)
                except Exception:
                    log.exception("kueue: localqueue %s/%s status failed", *key)

    def _write_cq_status(self, name: str) -> None:
        model = self.model
        cq = model.cqs.get(name)
        if cq is None or name not in model.cq_objs:
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
            status["pendingWorkloads"] = len(model.strategy.pending(cq))
            status["reservingWorkloads"] = len(cq.admitted)
            status["admittedWorkloads"] = len(cq.admitted)
            status["flavorsReservation"] = reservation
            status["flavorsUsage"] = deep_copy(reservation)
            if model.fair_sharing:
                status["fairSharing"] = {"weightedShare": model.share(cq).weighted}
            set_condition(status, "Active", *active, now, obj["metadata"].get("generation", 1))
            self.store.update(resources.CLUSTER_QUEUES, obj, subresource="status", check_rv=False)

    def _write_cohort_status(self, name: str) -> None:
        """A Cohort object's `fairSharing.weightedShare` (its share in its parent)."""
        co = self.model.cohorts.get(name)
        if co is None or name not in self.model.cohort_objs:
            return
        value = {"weightedShare": self.model.share(co).weighted}
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
        model = self.model
        lq = model.lqs[key]
        spec = lq.get("spec") or {}
        cq = model.cqs.get(spec.get("clusterQueue", ""))
        pending = reserving = 0
        usage: dict[tuple[str, str], int] = defaultdict(int)
        if cq is not None:
            for k in model.strategy.pending(cq):
                w = model.workloads[k]
                pending += w.ns == ns and w.queue == name
            for k in cq.admitted:
                w = model.workloads[k]
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
            if model.ledger is not None and cq is not None and cq.afs_mode:
                status["fairSharing"] = {
                    "weightedShare": 0,
                    "admissionFairSharingStatus": model.ledger.status(key, now_rfc3339),
                }
            set_condition(
                status, "Active", *active, self._now(), obj["metadata"].get("generation", 1)
            )
            self.store.update(resources.LOCAL_QUEUES, obj, subresource="status", check_rv=False)

    def set_admission_fair_sharing(self, config: afs.AfsConfig | None) -> None:
        """Run with another admissionFairSharing configuration (as Kueue restarted with it):
        the LocalQueues' usage memory starts again."""
        with self.lock:
            self.model.set_admission_fair_sharing(config)


def _put(table: dict, key: Any, value: Any, deleted: bool) -> None:
    if deleted:
        table.pop(key, None)
    else:
        table[key] = value


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
        lq = engine.model.lqs.get((namespace or "", local_queue))
        if lq is None:
            return []
        cluster_queue = (lq.get("spec") or {}).get("clusterQueue")
    if cluster_queue is None:
        return []
    items = []
    per_lq: dict[tuple[str, str], int] = defaultdict(int)
    for position, wl in enumerate(engine.model.pending_in_cq(cluster_queue)):
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
