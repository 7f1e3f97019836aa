"""Pod scheduler: binds pending pods to nodes (selectors, affinity, taints, GPU bin-packing)."""

from __future__ import annotations

import bisect
import logging

from kubesim import events
from kubesim.fleet import (
    GPU_UUIDS_ANNOTATION,
    MIG_PREFIX,
    MIG_PROFILE_ANNOTATION,
    SHARED_GPU,
    accelerator,
)
from kubesim.resources import PODS, PVCS
from kubesim.store import NotFound, deep_copy, now_rfc3339
from kueuemodel.resources import GPU, pod_requests, to_units
from kueuemodel.selectors import node_matches, required_terms, taint_text, untolerated

log = logging.getLogger(__name__)

GPU_ASSIGN_ANNOTATION = "kubesim.dev/gpu-uuids"
GPU_INDEX_ANNOTATION = "kubesim.dev/gpu-indices"
POD_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"

_HOSTNAME = "kubernetes.io/hostname"
TERMINAL = ("Succeeded", "Failed")


class NodeInfo:
    """Allocatable and allocated resources of one node, and which GPU indices are taken."""

    def __init__(self, obj: dict):
        meta, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
        self.name = meta["name"]
        self.labels = dict(meta.get("labels") or {})
        self.taints = list(spec.get("taints") or [])
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in status.get("conditions") or []
        )
        self.schedulable = ready and not spec.get("unschedulable")
        self.allocatable = {}
        for res, value in (status.get("allocatable") or status.get("capacity") or {}).items():
            try:
                self.allocatable[res] = to_units(res, value)
            except ValueError:
                continue
        self.used: dict[str, int] = {}
        # The resource the node's GPUs are scheduled as (a MIG profile's on MIG nodes); its
        # slots are numbered GPU by GPU (instance i of GPU g is slot g * per_gpu + i).
        self.accel, self.per_gpu = accelerator(obj)
        self.mig = bool((meta.get("annotations") or {}).get(MIG_PROFILE_ANNOTATION))
        self.gpu_taken: list[bool] = [False] * self.allocatable.get(self.accel, 0)
        self.uuids = [
            u for u in (meta.get("annotations") or {}).get(GPU_UUIDS_ANNOTATION, "").split(",") if u
        ]
        self.pods = 0
        label_part = tuple(sorted((k, v) for k, v in self.labels.items() if k != _HOSTNAME))
        taint_part = tuple(sorted(taint_text(t) for t in self.taints))
        self.shape = (label_part, taint_part, self.schedulable)

    def device(self, slot: int) -> str:
        """The device a slot is: a GPU's UUID, or "<GPU UUID>/<instance>" for a MIG slot (as
        the DCGM series name it)."""
        gpu, instance = divmod(slot, self.per_gpu)
        if gpu >= len(self.uuids):
            return ""
        return f"{self.uuids[gpu]}/{instance}" if self.mig else self.uuids[gpu]

    @property
    def free_gpus(self) -> int:
        return self.allocatable.get(self.accel, 0) - self.used.get(self.accel, 0)

    def fits(self, requests: dict[str, int]) -> str:
        """Empty when the requests fit, else the name of the first resource that does not."""
        if self.pods + 1 > self.allocatable.get("pods", 110):
            return "pods"
        for res, units in requests.items():
            if self.used.get(res, 0) + units > self.allocatable.get(res, 0):
                return res
        return ""


class Scheduler:
    """Binds pending pods to nodes: best fit on GPUs (fullest node first), deterministic."""

    def __init__(self, store, clock):
        self.store = store
        self.clock = clock
        self.nodes: dict[str, NodeInfo] = {}
        # shape -> free GPU count -> sorted node names
        self.buckets: dict[tuple, dict[int, list[str]]] = {}
        self.pending: dict[tuple[str, str], dict] = {}
        self.bound: dict[tuple[str, str], tuple[str, dict[str, int], list[int]]] = {}
        self.bound_uid: dict[tuple[str, str], str] = {}
        self.messages: dict[tuple[str, str], str] = {}
        self.nodes_changed = False
        self.fresh: set[tuple[str, str]] = set()  # pending pods not tried yet

    # ------------------------------------------------------------------ events

    def on_event(self, etype: str, rt, obj: dict) -> None:
        if rt.group != "":
            return
        if rt.plural == "nodes":
            self._node_event(etype, obj)
        elif rt.plural == "pods":
            self._pod_event(etype, obj)
        elif rt.plural == "persistentvolumeclaims":
            # A claim that appears or binds may let a waiting pod in: try them all again.
            self.nodes_changed = True

    def _node_event(self, etype: str, obj: dict) -> None:
        name = obj["metadata"]["name"]
        old = self.nodes.pop(name, None)
        if old is not None:
            self._unbucket(old)
        if etype != "DELETED":
            node = NodeInfo(obj)
            if old is not None:
                node.used, node.gpu_taken, node.pods = old.used, old.gpu_taken, old.pods
                extra = len(node.gpu_taken) - node.allocatable.get(node.accel, 0)
                if extra < 0:
                    node.gpu_taken += [False] * -extra
            self.nodes[name] = node
            self._bucket(node)
        self.nodes_changed = True

    def _pod_event(self, etype: str, obj: dict) -> None:
        meta, spec = obj["metadata"], obj.get("spec") or {}
        key = (meta["namespace"], meta["name"])
        phase = (obj.get("status") or {}).get("phase")
        uid = meta.get("uid", "")
        if key in self.bound and self.bound_uid.get(key, uid) != uid:
            # Events are coalesced per name: a pod recreated under the same name (a Volcano
            # restart) may arrive without the old one's DELETED event. Free the old pod.
            if etype == "DELETED":
                return
            self._free(key)
        if etype == "DELETED" or phase in TERMINAL or meta.get("deletionTimestamp"):
            self.pending.pop(key, None)
            self.messages.pop(key, None)
            self._free(key)
            return
        node_name = spec.get("nodeName")
        if not node_name and spec.get("schedulingGates"):
            # A gated pod is not a candidate until every gate is lifted (Kueue's topology gate).
            self.pending.pop(key, None)
            self.messages.pop(key, None)
            return
        if not node_name:
            if (spec.get("schedulerName") or "default-scheduler") in (
                "default-scheduler",
                "volcano",
                "kube-batch",
            ):
                if key not in self.pending:
                    self.fresh.add(key)
                self.pending[key] = obj
            return
        self.pending.pop(key, None)
        if key not in self.bound:
            # Bound elsewhere (restored state, or a user set nodeName): account for it.
            node = self.nodes.get(node_name)
            requests = pod_requests(spec)
            indices = [
                int(i)
                for i in (meta.get("annotations") or {}).get(GPU_INDEX_ANNOTATION, "").split(",")
                if i.strip().isdigit()
            ]
            if node is not None:
                self._take(node, key, requests, indices, uid)

    # ------------------------------------------------------------------ accounting

    def _bucket(self, node: NodeInfo) -> None:
        names = self.buckets.setdefault(node.shape, {}).setdefault(node.free_gpus, [])
        bisect.insort(names, node.name)

    def _unbucket(self, node: NodeInfo) -> None:
        names = self.buckets.get(node.shape, {}).get(node.free_gpus, [])
        i = bisect.bisect_left(names, node.name)
        if i < len(names) and names[i] == node.name:
            del names[i]

    def _take(
        self, node: NodeInfo, key, requests: dict[str, int], indices: list[int], uid: str = ""
    ) -> list[int]:
        self._unbucket(node)
        for res, units in requests.items():
            node.used[res] = node.used.get(res, 0) + units
        node.pods += 1
        want = requests.get(node.accel, 0)
        indices = [i for i in indices if 0 <= i < len(node.gpu_taken) and not node.gpu_taken[i]]
        if len(indices) != want:
            indices = [i for i, taken in enumerate(node.gpu_taken) if not taken][:want]
        for i in indices:
            node.gpu_taken[i] = True
        self._bucket(node)
        self.bound[key] = (node.name, requests, indices)
        self.bound_uid[key] = uid
        return indices

    def _free(self, key) -> None:
        entry = self.bound.pop(key, None)
        self.bound_uid.pop(key, None)
        if entry is None:
            return
        node = self.nodes.get(entry[0])
        if node is None:
            return
        self._unbucket(node)
        for res, units in entry[1].items():
            node.used[res] = node.used.get(res, 0) - units
        node.pods -= 1
        for i in entry[2]:
            if i < len(node.gpu_taken):
                node.gpu_taken[i] = False
        self._bucket(node)
        self.nodes_changed = True

    def gpus_of(self, namespace: str, name: str) -> tuple[str, list[int]] | None:
        entry = self.bound.get((namespace, name))
        return (entry[0], entry[2]) if entry else None

    # ------------------------------------------------------------------ scheduling

    def schedule(self) -> int:
        """Try to bind every pending pod; returns how many were bound."""
        if not self.pending:
            self.fresh.clear()
            return 0
        if self.nodes_changed:
            pods = list(self.pending.values())
        else:
            pods = [self.pending[k] for k in self.fresh if k in self.pending]
            groups_touched = {
                (p["metadata"]["namespace"], _group_of(p)) for p in pods if _group_of(p)
            }
            if groups_touched:
                pods = [
                    p
                    for p in self.pending.values()
                    if p["metadata"]["name"]
                    and (
                        (p["metadata"]["namespace"], _group_of(p)) in groups_touched
                        or (p["metadata"]["namespace"], p["metadata"]["name"]) in self.fresh
                    )
                ]
        self.nodes_changed = False
        self.fresh.clear()
        bound = 0
        pods.sort(key=_pod_order)
        groups: dict[tuple[str, str], list[dict]] = {}
        singles = []
        for pod in pods:
            group = _group_of(pod)
            if group:
                groups.setdefault((pod["metadata"]["namespace"], group), []).append(pod)
            else:
                singles.append(pod)
        feasibility: dict = {}
        for pod in singles:
            placement = self._place(pod, feasibility)
            if placement is not None:
                self._bind(pod, *placement)
                bound += 1
        for members in groups.values():
            bound += self._place_gang(members, feasibility)
        return bound

    def _place_gang(self, members: list[dict], feasibility) -> int:
        """All pending members of a PodGroup bind together, or none does."""
        placed = []
        for pod in members:
            placement = self._place(pod, feasibility, quiet=True)
            if placement is None:
                break
            node, requests = placement
            key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
            indices = self._take(node, key, requests, [], pod["metadata"].get("uid", ""))
            placed.append((pod, node, requests, indices))
        if len(placed) < len(members):
            for pod, _, _, _ in placed:
                self._free((pod["metadata"]["namespace"], pod["metadata"]["name"]))
            for pod in members:
                self._unschedulable(
                    pod,
                    f"pod group is not ready, {len(members)} Pending, "
                    f"{len(members)} minAvailable; Pending: {len(members)} Unschedulable",
                    reason="Unschedulable",
                )
            return 0
        for pod, node, requests, indices in placed:
            self._bind(pod, node, requests, indices)
        return len(placed)

    def _feasible_shapes(self, pod: dict, feasibility) -> list[tuple]:
        spec = pod.get("spec") or {}
        sig = repr((spec.get("nodeSelector"), spec.get("affinity"), spec.get("tolerations")))
        shapes = feasibility.get(sig)
        if shapes is None:
            shapes = []
            for shape in self.buckets:
                labels, _, schedulable = shape
                if not schedulable:
                    continue
                sample = self._sample(shape)
                if sample is None:
                    continue
                if not node_matches(spec, sample.labels) or untolerated(
                    sample.taints, spec.get("tolerations") or []
                ):
                    continue
                shapes.append(shape)
            feasibility[sig] = shapes
        return shapes

    def _sample(self, shape: tuple) -> NodeInfo | None:
        for names in self.buckets.get(shape, {}).values():
            if names:
                return self.nodes[names[0]]
        return None

    def _claim_problem(self, pod: dict) -> str:
        """Why the pod's PersistentVolumeClaims keep it off every node ("" when bound)."""
        namespace = pod["metadata"]["namespace"]
        for volume in (pod.get("spec") or {}).get("volumes") or []:
            claim_name = (volume.get("persistentVolumeClaim") or {}).get("claimName")
            if not claim_name:
                continue
            try:
                claim = self.store.get(PVCS, namespace, claim_name, copy=False)
            except NotFound:
                why = f'persistentvolumeclaim "{claim_name}" not found'
            else:
                if claim["metadata"].get("deletionTimestamp"):
                    why = f'persistentvolumeclaim "{claim_name}" is being deleted'
                elif (claim.get("status") or {}).get("phase") == "Bound":
                    continue
                else:
                    why = "pod has unbound immediate PersistentVolumeClaims"
            n = len(self.nodes)
            return (
                f"0/{n} nodes are available: {why}. preemption: 0/{n} nodes are available: "
                f"{n} Preemption is not helpful for scheduling."
            )
        return ""

    def _place(self, pod: dict, feasibility, quiet: bool = False):
        spec = pod.get("spec") or {}
        if problem := self._claim_problem(pod):
            if not quiet:
                self._unschedulable(pod, problem)
            return None
        requests = pod_requests(spec)
        gpus = sum(
            u for r, u in requests.items() if r in (GPU, SHARED_GPU) or r.startswith(MIG_PREFIX)
        )
        if _mentions_hostname(spec):
            candidates = [
                n
                for n in self.nodes.values()
                if n.schedulable
                and node_matches(spec, n.labels)
                and not untolerated(n.taints, spec.get("tolerations") or [])
                and not n.fits(requests)
            ]
            if candidates:
                best = min(candidates, key=lambda n: (n.free_gpus, n.name))
                return best, requests
        else:
            best = None
            for shape in self._feasible_shapes(pod, feasibility):
                buckets = self.buckets[shape]
                for free in sorted(f for f in buckets if f >= gpus and buckets[f]):
                    if best is not None and free > best.free_gpus:
                        break
                    for name in buckets[free]:
                        node = self.nodes[name]
                        if not node.fits(requests):
                            if best is None or (free, name) < (best.free_gpus, best.name):
                                best = node
                            break
            if best is not None:
                return best, requests
        if not quiet:
            # Pods alike (same constraints and requests) get the same explanation this round.
            spec_sig = repr((spec.get("nodeSelector"), spec.get("affinity"),
                             spec.get("tolerations"), sorted(requests.items())))  # fmt: skip
            cache = feasibility.setdefault("explain", {})
            if spec_sig not in cache:
                cache[spec_sig] = self._explain(pod, requests)
            self._unschedulable(pod, cache[spec_sig])
        return None

    def _explain(self, pod: dict, requests: dict[str, int]) -> str:
        spec = pod.get("spec") or {}
        reasons: dict[str, int] = {}
        for node in self.nodes.values():
            if not node.schedulable:
                why = "node(s) were unschedulable"
            elif not node_matches(spec, node.labels):
                why = "node(s) didn't match Pod's node affinity/selector"
            elif bad := untolerated(node.taints, spec.get("tolerations") or []):
                taint = bad[0]
                value = f": {taint.get('value')}" if taint.get("value") else ""
                why = f"node(s) had untolerated taint {{{taint.get('key')}{value}}}"
            elif res := node.fits(requests):
                why = "Too many pods" if res == "pods" else f"Insufficient {res}"
            else:
                continue
            reasons[why] = reasons.get(why, 0) + 1
        parts = sorted(f"{count} {why}" for why, count in reasons.items())
        text = f"0/{len(self.nodes)} nodes are available"
        return f"{text}: {', '.join(parts)}." if parts else f"{text}."

    def _unschedulable(self, pod: dict, message: str, reason: str = "Unschedulable") -> None:
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        if self.messages.get(key) == message:
            return
        self.messages[key] = message
        now = now_rfc3339(self.clock.timestamp())
        with self.store.lock:
            try:
                current = self.store.get(PODS, key[0], key[1], copy=False)
            except NotFound:
                return
            if (current.get("spec") or {}).get("nodeName"):
                return
            status = deep_copy(current.get("status") or {})
            status["phase"] = "Pending"
            _pod_condition(status, "PodScheduled", "False", reason, message, now)
            self.store.update(
                PODS, {**current, "status": status}, subresource="status", check_rv=False
            )
        events.record(self.store, obj=current, reason="FailedScheduling", message=message,
                      component="default-scheduler", now=self.clock.timestamp(),
                      type_="Warning")  # fmt: skip

    def _bind(self, pod: dict, node: NodeInfo, requests: dict[str, int], indices=None) -> None:
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        if indices is None:
            indices = self._take(node, key, requests, [], pod["metadata"].get("uid", ""))
        self.pending.pop(key, None)
        self.messages.pop(key, None)
        now = now_rfc3339(self.clock.timestamp())
        with self.store.lock:
            try:
                current = self.store.get(PODS, key[0], key[1], copy=False)
            except NotFound:
                self._free(key)
                return
            if current["metadata"].get("uid") != pod["metadata"].get("uid"):
                self._free(key)
                return
            meta = dict(current["metadata"])
            if indices:
                annotations = meta["annotations"] = dict(meta.get("annotations") or {})
                annotations[GPU_INDEX_ANNOTATION] = ",".join(map(str, indices))
                annotations[GPU_ASSIGN_ANNOTATION] = ",".join(
                    device for i in indices if (device := node.device(i))
                )
            status = deep_copy(current.get("status") or {})
            _pod_condition(status, "PodScheduled", "True", "", "", now)
            new = {
                **current,
                "metadata": meta,
                "spec": {**(current.get("spec") or {}), "nodeName": node.name},
                "status": status,
            }
            self.store.update(
                PODS, new, subresource="all", check_rv=False, manager="kube-scheduler"
            )
        events.record(
            self.store, obj=current, reason="Scheduled",
            message=f"Successfully assigned {key[0]}/{key[1]} to {node.name}",
            component="default-scheduler", now=self.clock.timestamp(),
        )  # fmt: skip


def _pod_order(pod: dict) -> tuple:
    spec = pod.get("spec") or {}
    meta = pod["metadata"]
    return (
        -int(spec.get("priority") or 0),
        meta.get("creationTimestamp", ""),
        meta["namespace"],
        meta["name"],
    )


def _group_of(pod: dict) -> str:
    """The Volcano PodGroup of a pod scheduled by Volcano (gang), else ""."""
    if (pod.get("spec") or {}).get("schedulerName") != "volcano":
        return ""
    return (pod["metadata"].get("annotations") or {}).get(POD_GROUP_ANNOTATION, "")


def _mentions_hostname(spec: dict) -> bool:
    if _HOSTNAME in (spec.get("nodeSelector") or {}):
        return True
    return any(
        e.get("key") == _HOSTNAME
        for term in required_terms(spec)
        for e in term.get("matchExpressions") or []
    )


def _pod_condition(status: dict, ctype: str, value: str, reason: str, message: str, now: str):
    conds = status.setdefault("conditions", [])
    for cond in conds:
        if cond["type"] == ctype:
            if cond.get("status") != value:
                cond["lastTransitionTime"] = now
            cond.update(status=value)
            _set_or_drop(cond, "reason", reason)
            _set_or_drop(cond, "message", message)
            return
    cond = {"type": ctype, "status": value, "lastProbeTime": None, "lastTransitionTime": now}
    _set_or_drop(cond, "reason", reason)
    _set_or_drop(cond, "message", message)
    conds.append(cond)


def _set_or_drop(d: dict, key: str, value: str) -> None:
    if value:
        d[key] = value
    else:
        d.pop(key, None)
