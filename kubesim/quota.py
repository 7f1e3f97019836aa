"""ResourceQuota admission as the API server does it for pods: a pod whose requests would take
a namespace over a quota's hard limits is refused with 403 Forbidden and the real message
("exceeded quota: NAME, requested: ..., used: ..., limited: ..."). Used amounts are the
requests of the namespace's pods that have not ended."""

from __future__ import annotations

from kubesim import resources
from kueuemodel.resources import pod_requests, to_units

TERMINAL = ("Succeeded", "Failed")


def _tracked(key: str) -> str | None:
    """The pod resource a quota key counts ("requests.nvidia.com/gpu" -> nvidia.com/gpu)."""
    if key == "pods":
        return "pods"
    if key.startswith("requests."):
        return key[len("requests.") :]
    if key in ("cpu", "memory") or key.startswith("nvidia.com/"):
        return key
    return None


def _text(key: str, units: int) -> str:
    if key.endswith("cpu"):
        return str(units // 1000) if units % 1000 == 0 else f"{units}m"
    if key.endswith("memory"):
        mib = units // (1024 * 1024)
        return f"{mib // 1024}Gi" if mib and mib % 1024 == 0 else f"{mib}Mi"
    return str(units)


def quota_problem(store, pod: dict) -> str:
    """Why the namespace's quotas refuse this pod ("" when they admit it)."""
    namespace = pod["metadata"].get("namespace") or "default"
    quotas = [q for q in store.list(resources.RESOURCE_QUOTAS, copy=False)
              if q["metadata"].get("namespace") == namespace]  # fmt: skip
    if not quotas:
        return ""
    wanted = {**pod_requests(pod.get("spec") or {}), "pods": 1}
    used = used_in(store, namespace)
    for quota in sorted(quotas, key=lambda q: q["metadata"]["name"]):
        over = []
        for key, limit in sorted(((quota.get("spec") or {}).get("hard") or {}).items()):
            res = _tracked(key)
            if res is None or not wanted.get(res):
                continue
            hard = to_units(res if res != "pods" else "pods", limit)
            if used.get(res, 0) + wanted[res] > hard:
                over.append((key, res, hard))
        if over:
            requested = ",".join(f"{k}={_text(k, wanted[r])}" for k, r, _ in over)
            in_use = ",".join(f"{k}={_text(k, used.get(r, 0))}" for k, r, _ in over)
            limited = ",".join(f"{k}={_text(k, h)}" for k, _, h in over)
            return (
                f'pods "{pod["metadata"].get("name", "")}" is forbidden: exceeded quota: '
                f"{quota['metadata']['name']}, requested: {requested}, used: {in_use}, "
                f"limited: {limited}"
            )
    return ""


def used_in(store, namespace: str) -> dict[str, int]:
    """Requests of the namespace's pods that have not ended, and their count."""
    used: dict[str, int] = {"pods": 0}
    for pod in store.list(resources.PODS, copy=False):
        meta = pod["metadata"]
        if meta.get("namespace") != namespace or meta.get("deletionTimestamp"):
            continue
        if (pod.get("status") or {}).get("phase") in TERMINAL:
            continue
        used["pods"] += 1
        for name, units in pod_requests(pod.get("spec") or {}).items():
            used[name] = used.get(name, 0) + units
    return used


class QuotaStatus:
    """The quota controller's part: each ResourceQuota's status.hard and status.used."""

    def __init__(self, store):
        self.store = store
        self.dirty: set[str] = set()

    def on_event(self, etype: str, rt, obj: dict) -> None:
        if rt.group == "" and rt.plural in ("pods", "resourcequotas"):
            self.dirty.add(obj["metadata"].get("namespace") or "default")

    def reconcile(self) -> int:
        dirty, self.dirty = self.dirty, set()
        written = 0
        for namespace in sorted(dirty):
            quotas = [q for q in self.store.list(resources.RESOURCE_QUOTAS)
                      if q["metadata"].get("namespace") == namespace]  # fmt: skip
            if not quotas:
                continue
            used = used_in(self.store, namespace)
            for quota in quotas:
                hard = dict((quota.get("spec") or {}).get("hard") or {})
                status = {"hard": hard, "used": {
                    key: _text(key, used.get(_tracked(key) or "", 0)) for key in hard
                }}  # fmt: skip
                if quota.get("status") != status:
                    quota["status"] = status
                    self.store.update(resources.RESOURCE_QUOTAS, quota, subresource="status",
                                      check_rv=False)  # fmt: skip
                    written += 1
        return written
