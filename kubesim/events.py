"""Kubernetes Events as the real components record them (reason, message and source worded as
kube-scheduler, the kubelet and Kueue word them). The same event again raises its count and its
lastTimestamp, as the API server's event deduplication does."""

from __future__ import annotations

import hashlib
import logging

from kubesim.resources import EVENTS
from kubesim.store import AlreadyExists, NotFound, now_rfc3339

log = logging.getLogger(__name__)


def record(
    store, *, obj: dict, reason: str, message: str, component: str, now: float | str,
    type_: str = "Normal",
) -> None:  # fmt: skip
    """An Event about `obj` (a Pod, Workload, ...), in its namespace."""
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace") or "default"
    stamp = now if isinstance(now, str) else now_rfc3339(now)
    digest = hashlib.sha1(f"{meta.get('uid')}/{reason}/{message}".encode()).hexdigest()[:16]
    name = f"{meta.get('name')}.{digest}"
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": namespace},
        "involvedObject": {
            "apiVersion": obj.get("apiVersion", "v1"), "kind": obj.get("kind", ""),
            "name": meta.get("name", ""), "namespace": namespace, "uid": meta.get("uid", ""),
        },
        "reason": reason,
        "message": message,
        "type": type_,
        "source": {"component": component},
        "reportingComponent": component,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }  # fmt: skip
    try:
        store.create(EVENTS, event)
    except AlreadyExists:
        try:
            current = store.get(EVENTS, namespace, name)
        except NotFound:
            return
        current["count"] = int(current.get("count") or 1) + 1
        current["lastTimestamp"] = stamp
        try:
            store.update(EVENTS, current, check_rv=False)
        except Exception:  # an event is best effort, as on a real cluster
            log.debug("event %s/%s not updated", namespace, name, exc_info=True)
    except Exception:
        log.debug("event %s/%s not recorded", namespace, name, exc_info=True)
