"""Simulated storage: a default StorageClass and a provisioner that binds claims at once.

A PersistentVolumeClaim naming a StorageClass that exists (or none, when a default class
exists) is provisioned and bound on the next round, like a CSI driver with Immediate binding:
`spec.volumeName` set to `pvc-<uid>`, `status.phase` Bound with the requested capacity. A claim
naming an unknown class stays Pending with the persistentvolume-controller's ProvisioningFailed
event. A grown request is resized in place (the class allows expansion), as the external
resizer does. Pods that mount claims are held by the scheduler until the claims are bound.
"""

from __future__ import annotations

import contextlib
import logging

from kubesim import events, resources
from kubesim.store import AlreadyExists, NotFound

log = logging.getLogger(__name__)

DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"
DEFAULT_CLASS = "standard"
PROVISIONER = "kubesim.dev/hostpath"


class VolumeBinder:
    """Binds and resizes PersistentVolumeClaims."""

    def __init__(self, store, clock):
        self.store = store
        self.clock = clock
        self.todo: set[tuple[str, str]] = set()

    def ensure_default_class(self) -> None:
        """The `standard` class, marked default, when the cluster has no StorageClass."""
        if self.store.list(resources.STORAGE_CLASSES, copy=False):
            return
        with contextlib.suppress(AlreadyExists):
            self.store.create(
                resources.STORAGE_CLASSES,
                {
                    "apiVersion": "storage.k8s.io/v1",
                    "kind": "StorageClass",
                    "metadata": {
                        "name": DEFAULT_CLASS,
                        "annotations": {DEFAULT_CLASS_ANNOTATION: "true"},
                    },
                    "provisioner": PROVISIONER,
                    "reclaimPolicy": "Delete",
                    "volumeBindingMode": "Immediate",
                    "allowVolumeExpansion": True,
                },
            )

    def on_event(self, etype: str, rt, obj: dict) -> None:
        if rt.group == "" and rt.plural == "persistentvolumeclaims":
            key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
            if etype == "DELETED":
                self.todo.discard(key)
            else:
                self.todo.add(key)
        elif rt.plural == "storageclasses" and etype != "DELETED":
            # A class that appears may be the one a pending claim waits for.
            for claim in self.store.list(resources.PVCS, copy=False):
                if (claim.get("status") or {}).get("phase") != "Bound":
                    meta = claim["metadata"]
                    self.todo.add((meta["namespace"], meta["name"]))

    def _classes(self) -> dict[str, dict]:
        return {c["metadata"]["name"]: c for c in self.store.list(resources.STORAGE_CLASSES)}

    def reconcile(self) -> int:
        todo, self.todo = self.todo, set()
        if not todo:
            return 0
        classes = self._classes()
        changed = 0
        for key in sorted(todo):
            try:
                changed += self._bind(key, classes)
            except Exception:
                log.exception("volume binder: claim %s/%s failed", *key)
        return changed

    def _bind(self, key, classes: dict[str, dict]) -> int:
        now = self.clock.timestamp()
        with self.store.lock:
            try:
                claim = self.store.get(resources.PVCS, key[0], key[1])
            except NotFound:
                return 0
            if claim["metadata"].get("deletionTimestamp"):
                return 0
            spec, status = claim.get("spec") or {}, claim.get("status") or {}
            wanted = ((spec.get("resources") or {}).get("requests") or {}).get("storage", "")
            if status.get("phase") == "Bound":
                if wanted and (status.get("capacity") or {}).get("storage") != wanted:
                    status["capacity"] = {"storage": wanted}
                    claim["status"] = status
                    self.store.update(resources.PVCS, claim, subresource="status",
                                      check_rv=False)  # fmt: skip
                    return 1
                return 0
            class_name = spec.get("storageClassName")
            if class_name is None:
                default = next(
                    (name for name, c in classes.items()
                     if (c["metadata"].get("annotations") or {}).get(DEFAULT_CLASS_ANNOTATION)
                     == "true"),
                    None,
                )  # fmt: skip
                if default is None:
                    return self._pending(claim, "FailedBinding",
                                         "no persistent volumes available for this claim and no "
                                         "storage class is set", now)  # fmt: skip
                class_name = default
            if class_name not in classes:
                return self._pending(claim, "ProvisioningFailed",
                                     f'storageclass.storage.k8s.io "{class_name}" not found',
                                     now)  # fmt: skip
            volume = f"pvc-{claim['metadata'].get('uid', '')}"
            spec["storageClassName"] = class_name
            spec["volumeName"] = volume
            claim["spec"] = spec
            claim["status"] = {
                "phase": "Bound",
                "accessModes": list(spec.get("accessModes") or []),
                "capacity": {"storage": wanted},
            }
            self.store.update(resources.PVCS, claim, subresource="all", check_rv=False)
        events.record(self.store, obj=claim, reason="ProvisioningSucceeded",
                      message=f"Successfully provisioned volume {volume}",
                      component=PROVISIONER, now=now)  # fmt: skip
        return 1

    def _pending(self, claim: dict, reason: str, message: str, now: float) -> int:
        status = claim.get("status") or {}
        if status.get("phase") != "Pending":
            claim["status"] = {**status, "phase": "Pending"}
            self.store.update(resources.PVCS, claim, subresource="status", check_rv=False)
        events.record(self.store, obj=claim, reason=reason, message=message,
                      component="persistentvolume-controller", now=now,
                      type_="Warning")  # fmt: skip
        return 0
