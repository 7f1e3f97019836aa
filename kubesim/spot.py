"""Spot capacity in kubesim: nodes that the provider takes back, and checkpoints that survive it.

A fleet pool with `spot: true` labels its nodes `kubesim.dev/capacity-type: spot` (and
`cloud.google.com/gke-spot: "true"`). A spot node is interrupted on demand (`interrupt`) or,
with `interruptions: {meanSeconds, noticeSeconds, downSeconds, seed}`, at random times drawn
from a seeded generator (reproducible runs). An interruption goes as a provider's does:

- notice: the node is tainted `cloud.google.com/impending-node-termination:NoSchedule` and gets
  the condition `TerminationNotice` (True, reason SpotInterruption), so nothing new lands there;
- after `noticeSeconds`, its running pods are stopped as the kubelet's graceful node shutdown
  stops them (phase Failed, reason Terminated, condition DisruptionTarget with reason
  TerminationByKubelet) and the node goes NotReady;
- after `downSeconds` more, the capacity is back: Ready, no taint, no notice.

Checkpoints: a container with CHECKPOINT_DIR set, under a mount of a PersistentVolumeClaim, is
taken to save its progress there continuously. When such a pod is stopped, the work it did is
recorded on the claim (an annotation per job and completion index); a pod of the same job and
index that starts later with the same checkpoint resumes: it runs only for the work left. A pod
without a checkpoint starts over.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import random

from kubesim import resources
from kubesim.clock import parse_time
from kubesim.fleet import CAPACITY_LABEL, INTERRUPTIONS_ANNOTATION
from kubesim.jobs import _set_cond
from kubesim.store import NotFound, deep_copy, now_rfc3339
from kueuemodel.selectors import untolerated

log = logging.getLogger(__name__)

NOTICE_TAINT = {
    "key": "cloud.google.com/impending-node-termination",
    "value": "true",
    "effect": "NoSchedule",
}
NOTICE_CONDITION = "TerminationNotice"
SHUTDOWN_MESSAGE = "Pod was terminated in response to imminent node shutdown."
CHECKPOINT_ENV = "CHECKPOINT_DIR"
CHECKPOINT_PREFIX = "kubesim.dev/checkpoint-"
INDEX_KEY = "batch.kubernetes.io/job-completion-index"
_TERMINAL = ("Succeeded", "Failed")
TAINT_MANAGER, TAINT_MESSAGE = (
    "DeletionByTaintManager",
    "Taint manager: deleting due to NoExecute taint",
)
POD_GC, POD_GC_MESSAGE = "DeletionByPodGC", "PodGC: node no longer exists"
EVICTION_SECONDS = 2.0  # how long an evicted pod stays (Failed) before it is gone


# ------------------------------------------------------------------------------ checkpoints


def checkpoint_of(store, pod: dict) -> tuple[str, str] | None:
    """(claim name, annotation key) where the pod keeps its checkpoint, or None."""
    meta, spec = pod["metadata"], pod.get("spec") or {}
    claims = {
        v["name"]: v["persistentVolumeClaim"]["claimName"]
        for v in spec.get("volumes") or []
        if (v.get("persistentVolumeClaim") or {}).get("claimName")
    }
    owner = next((r.get("name") for r in meta.get("ownerReferences") or []), meta["name"])
    index = (meta.get("annotations") or {}).get(INDEX_KEY, "0")
    for container in spec.get("containers") or []:
        directory = next(
            (e.get("value") for e in container.get("env") or []
             if e.get("name") == CHECKPOINT_ENV and e.get("value")), None,
        )  # fmt: skip
        if not directory:
            continue
        for mount in container.get("volumeMounts") or []:
            path = mount.get("mountPath", "").rstrip("/") + "/"
            if mount.get("name") in claims and (directory.rstrip("/") + "/").startswith(path):
                digest = hashlib.sha1(f"{owner}/{index}/{directory}".encode()).hexdigest()[:16]
                return claims[mount["name"]], CHECKPOINT_PREFIX + digest
    return None


def work_done(store, pod: dict) -> float:
    """Seconds of work the pod's checkpoint holds (0 without one)."""
    found = checkpoint_of(store, pod)
    if found is None:
        return 0.0
    claim, key = found
    try:
        pvc = store.get(resources.PVCS, pod["metadata"]["namespace"], claim, copy=False)
    except NotFound:
        return 0.0
    try:
        return float((pvc["metadata"].get("annotations") or {}).get(key, 0))
    except ValueError:
        return 0.0


def _save_checkpoint(store, pod: dict, seconds: float) -> None:
    found = checkpoint_of(store, pod)
    if found is None:
        return
    claim, key = found
    with store.lock:
        try:
            pvc = store.get(resources.PVCS, pod["metadata"]["namespace"], claim)
        except NotFound:
            return
        annotations = pvc["metadata"].setdefault("annotations", {})
        annotations[key] = str(round(seconds, 3))
        store.update(resources.PVCS, pvc, check_rv=False)


# ------------------------------------------------------------------------------ interruptions


class SpotController:
    def __init__(self, store, clock):
        self.store = store
        self.clock = clock
        # node -> [phase ("notice" | "down"), time of the next step, down seconds]
        self.reclaims: dict[str, list] = {}
        # node -> (reason, message, NoExecute taints or None when the node is gone)
        self.evictions: dict[str, tuple] = {}
        self.doomed: list[tuple[float, str, str, str]] = []  # (when, namespace, pod, uid)
        self.plans: dict[str, tuple[dict, random.Random, float]] = {}  # random interruptions

    def on_event(self, etype: str, rt, obj: dict) -> None:
        if rt.group != "" or rt.plural != "nodes":
            return
        meta = obj["metadata"]
        name = meta["name"]
        # The taint manager and pod garbage collector: the pods a NoExecute taint they do not
        # tolerate, or their node's deletion, takes away.
        if etype == "DELETED":
            self.evictions[name] = (POD_GC, POD_GC_MESSAGE, None)
        else:
            no_execute = [t for t in (obj.get("spec") or {}).get("taints") or []
                          if t.get("effect") == "NoExecute"]  # fmt: skip
            if no_execute:
                self.evictions[name] = (TAINT_MANAGER, TAINT_MESSAGE, no_execute)
        plan = (meta.get("annotations") or {}).get(INTERRUPTIONS_ANNOTATION)
        if etype == "DELETED" or not plan:
            self.plans.pop(name, None)
            return
        if name not in self.plans:
            try:
                spec = json.loads(plan)
            except ValueError:
                return
            seed = int(spec.get("seed", 0)) + int(hashlib.sha1(name.encode()).hexdigest()[:8], 16)
            rng = random.Random(seed)
            first = self.clock.timestamp() + rng.expovariate(1 / float(spec["meanSeconds"]))
            self.plans[name] = (spec, rng, first)

    def interrupt(self, node: str, *, notice: float = 30.0, down: float = 60.0) -> bool:
        """Give a spot node its termination notice; False if it is not a spot node or is
        already being reclaimed."""
        with self.store.lock:
            try:
                obj = self.store.get(resources.NODES, None, node)
            except NotFound:
                return False
            if (obj["metadata"].get("labels") or {}).get(CAPACITY_LABEL) != "spot":
                return False
            if node in self.reclaims:
                return False
            now = self.clock.timestamp()
            spec = obj.setdefault("spec", {})
            taints = [t for t in spec.get("taints") or [] if t.get("key") != NOTICE_TAINT["key"]]
            spec["taints"] = [*taints, dict(NOTICE_TAINT)]
            status = obj.setdefault("status", {})
            _set_cond(status, NOTICE_CONDITION, "True", "SpotInterruption",
                      f"The provider reclaims this spot node; pods stop at "
                      f"{now_rfc3339(now + notice)}.", now_rfc3339(now))  # fmt: skip
            self.store.update(resources.NODES, obj, subresource="all", check_rv=False)
        self.reclaims[node] = ["notice", now + notice, down]
        log.info("spot: %s reclaimed, pods stop in %.0f s", node, notice)
        return True

    def next_wakeup(self) -> float | None:
        times = [r[1] for r in self.reclaims.values()] + [p[2] for p in self.plans.values()]
        times += [d[0] for d in self.doomed]
        if self.evictions:
            times.append(self.clock.timestamp())
        return min(times) if times else None

    def _evict(self, now: float) -> None:
        """Mark the pods the taint manager or the pod GC takes (condition DisruptionTarget,
        phase Failed) and delete them a moment later, as a kubelet ends a deleted pod."""
        evictions, self.evictions = self.evictions, {}
        stamp = now_rfc3339(now)
        for pod in self.store.list(resources.PODS):
            spec, meta = pod.get("spec") or {}, pod["metadata"]
            node = spec.get("nodeName")
            if node not in evictions or meta.get("deletionTimestamp"):
                continue
            reason, message, taints = evictions[node]
            if taints is not None and not untolerated(taints, spec.get("tolerations") or []):
                continue
            if (pod.get("status") or {}).get("phase") not in _TERMINAL:
                self._stop_pod(pod, stamp, reason=reason, message=message)
            self.doomed.append((now + EVICTION_SECONDS, meta["namespace"], meta["name"],
                                meta.get("uid", "")))  # fmt: skip

    def tick(self) -> None:
        now = self.clock.timestamp()
        if self.evictions:
            self._evict(now)
        due = [d for d in self.doomed if d[0] <= now]
        self.doomed = [d for d in self.doomed if d[0] > now]
        for _, namespace, name, uid in due:
            with contextlib.suppress(NotFound):
                if self.store.get(resources.PODS, namespace, name)["metadata"].get("uid") == uid:
                    self.store.delete(resources.PODS, namespace, name)
        for name, (spec, rng, due) in list(self.plans.items()):
            if due <= now:
                self.interrupt(name, notice=float(spec.get("noticeSeconds", 30)),
                               down=float(spec.get("downSeconds", 60)))  # fmt: skip
                delay = rng.expovariate(1 / float(spec["meanSeconds"]))
                self.plans[name] = (spec, rng, now + float(spec.get("downSeconds", 60)) + delay)
        for name, (phase, due, down) in list(self.reclaims.items()):
            if due > now:
                continue
            if phase == "notice":
                self._shut_down(name, now)
                self.reclaims[name] = ["down", now + down, down]
            else:
                self._restore(name, now)
                del self.reclaims[name]

    def _shut_down(self, node: str, now: float) -> None:
        stamp = now_rfc3339(now)
        for pod in self.store.list(resources.PODS):
            spec, status = pod.get("spec") or {}, pod.get("status") or {}
            if spec.get("nodeName") != node or status.get("phase") in _TERMINAL:
                continue
            started = parse_time(status.get("startTime"))
            if started is not None and checkpoint_of(self.store, pod):
                done = work_done(self.store, pod) + max(0.0, now - started.timestamp())
                _save_checkpoint(self.store, pod, done)
            self._stop_pod(pod, stamp)
        self._node(node, ready=False, now=now)

    def _stop_pod(
        self, pod: dict, stamp: str, *, reason: str = "TerminationByKubelet",
        message: str = SHUTDOWN_MESSAGE,
    ) -> None:  # fmt: skip
        meta = pod["metadata"]
        with self.store.lock:
            try:
                current = self.store.get(resources.PODS, meta["namespace"], meta["name"])
            except NotFound:
                return
            status = deep_copy(current.get("status") or {})
            status.update(phase="Failed", reason="Terminated", message=message)
            conds = [c for c in status.get("conditions") or [] if c.get("type") != "Ready"]
            conds.append({"type": "DisruptionTarget", "status": "True", "reason": reason,
                          "message": message, "lastTransitionTime": stamp})  # fmt: skip
            conds.append({"type": "Ready", "status": "False", "reason": "PodFailed",
                          "lastTransitionTime": stamp})  # fmt: skip
            status["conditions"] = conds
            for cs in status.get("containerStatuses") or []:
                started = ((cs.get("state") or {}).get("running") or {}).get("startedAt")
                ended = {"exitCode": 137, "reason": "Error", "startedAt": started,
                         "finishedAt": stamp}  # fmt: skip
                cs["state"] = {"terminated": ended}
                cs["ready"] = False
            current["status"] = status
            self.store.update(resources.PODS, current, subresource="status", check_rv=False)

    def _restore(self, node: str, now: float) -> None:
        self._node(node, ready=True, now=now)

    def _node(self, node: str, *, ready: bool, now: float) -> None:
        stamp = now_rfc3339(now)
        with self.store.lock, contextlib.suppress(NotFound):
            obj = self.store.get(resources.NODES, None, node)
            status = obj.setdefault("status", {})
            if ready:
                spec = obj.setdefault("spec", {})
                spec["taints"] = [t for t in spec.get("taints") or []
                                  if t.get("key") != NOTICE_TAINT["key"]]  # fmt: skip
                if not spec["taints"]:
                    del spec["taints"]
                status["conditions"] = [c for c in status.get("conditions") or []
                                        if c.get("type") != NOTICE_CONDITION]  # fmt: skip
                ready_text = "kubelet is posting ready status (simulated by kubesim)"
                _set_cond(status, "Ready", "True", "KubeletReady", ready_text, stamp)
            else:
                _set_cond(status, "Ready", "False", "NodeShutdown",
                          "The spot node was reclaimed by the provider.", stamp)  # fmt: skip
            self.store.update(resources.NODES, obj, subresource="all", check_rv=False)
