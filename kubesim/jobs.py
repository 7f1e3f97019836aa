"""batch/v1 Job controller: pods for parallelism/completions (Indexed too), status, backoff."""

from __future__ import annotations

import contextlib
import hashlib
import heapq
import logging
from datetime import datetime

from kubesim import events, resources
from kubesim.clock import parse_time
from kubesim.kueue import QUEUE_LABEL
from kubesim.store import Forbidden, NotFound, deep_copy, now_rfc3339
from kueuemodel import tas

log = logging.getLogger(__name__)

INDEX_KEY = "batch.kubernetes.io/job-completion-index"
JOB_NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")
UID_LABELS = ("batch.kubernetes.io/controller-uid", "controller-uid")
_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
TERMINAL = ("Succeeded", "Failed")


class Deadlines:
    """Jobs' activeDeadlineSeconds by job key, with the earliest found without a scan (a heap
    with stale entries skipped), since the controller asks on every round."""

    def __init__(self):
        self._at: dict[tuple[str, str], float] = {}
        self._heap: list[tuple[float, tuple[str, str]]] = []

    def __setitem__(self, key: tuple[str, str], deadline: float) -> None:
        if self._at.get(key) != deadline:
            self._at[key] = deadline
            heapq.heappush(self._heap, (deadline, key))

    def pop(self, key: tuple[str, str], default=None):
        return self._at.pop(key, default)

    def _drop_stale(self) -> None:
        while self._heap and self._at.get(self._heap[0][1]) != self._heap[0][0]:
            heapq.heappop(self._heap)

    def earliest(self) -> float | None:
        self._drop_stale()
        return self._heap[0][0] if self._heap else None

    def due(self, now: float) -> list[tuple[str, str]]:
        """Keys whose deadline has passed (they stay until set again or popped)."""
        out = []
        self._drop_stale()
        while self._heap and self._heap[0][0] <= now:
            deadline, key = heapq.heappop(self._heap)
            if self._at.get(key) == deadline:
                out.append(key)
                del self._at[key]
        return out


def pod_suffix(seed: str, n: int = 5) -> str:
    """A deterministic API-server-style random suffix."""
    digest = hashlib.sha1(seed.encode()).digest()
    return "".join(_ALPHABET[b % len(_ALPHABET)] for b in digest[:n])


def job_owner(pod: dict) -> str | None:
    """Name of the batch/v1 Job that controls the pod, if any."""
    for ref in pod["metadata"].get("ownerReferences") or []:
        if ref.get("kind") == "Job" and ref.get("apiVersion") == "batch/v1":
            return ref.get("name")
    return None


def finished_condition(job: dict) -> str:
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") in ("Complete", "Failed") and cond.get("status") == "True":
            return cond["type"]
    return ""


def compress_indexes(indexes: list[int]) -> str:
    """Kubernetes' completedIndexes format, e.g. "0-2,5"."""
    out, start, prev = [], None, None
    for i in sorted(set(indexes)):
        if start is None:
            start = prev = i
        elif i == prev + 1:
            prev = i
        else:
            out.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = prev = i
    if start is not None:
        out.append(f"{start}" if start == prev else f"{start}-{prev}")
    return ",".join(out)


class JobController:
    """Creates and counts the pods of batch/v1 Jobs."""

    def __init__(self, store, clock, kueue=None):
        self.store = store
        self.clock = clock
        self.kueue = kueue
        self.jobs: dict[tuple[str, str], dict] = {}
        self.pods: dict[tuple[str, str], dict[str, dict]] = {}
        self.created: dict[str, int] = {}  # job uid -> pods created so far (name seeds)
        self.todo: set[tuple[str, str]] = set()
        self.deadlines = Deadlines()

    def on_event(self, etype: str, rt, obj: dict) -> None:
        meta = obj["metadata"]
        if rt.group == resources.BATCH and rt.plural == "jobs":
            key = (meta["namespace"], meta["name"])
            if etype == "DELETED":
                self.jobs.pop(key, None)
                self.deadlines.pop(key, None)
                self.created.pop(meta.get("uid", ""), None)
            else:
                self.jobs[key] = obj
            self.todo.add(key)
        elif rt.group == "" and rt.plural == "pods":
            owner = job_owner(obj)
            if owner is None:
                return
            key = (meta["namespace"], owner)
            pods = self.pods.setdefault(key, {})
            if etype == "DELETED":
                pods.pop(meta["name"], None)
                if not pods:
                    del self.pods[key]
            else:
                pods[meta["name"]] = obj
            self.todo.add(key)

    def next_deadline(self) -> float | None:
        return self.deadlines.earliest()

    def reconcile(self) -> None:
        now = self.clock.now()
        self.todo.update(self.deadlines.due(now.timestamp()))
        todo, self.todo = self.todo, set()
        for key in sorted(todo):
            if key not in self.jobs:
                continue
            try:
                # Our own recent writes may not have come back as events yet: read the store.
                job = self.store.get(resources.JOBS, key[0], key[1], copy=False)
            except NotFound:
                continue
            try:
                self._sync(job, now)
            except Exception:
                log.exception("jobs: syncing %s/%s failed", *key)

    # ----------------------------------------------------------------------------------

    def _sync(self, job: dict, now: datetime) -> None:
        meta, spec = job["metadata"], job.get("spec") or {}
        key = (meta["namespace"], meta["name"])
        status = deep_copy(job.get("status") or {})
        pods = self.pods.get(key, {})
        live = [p for p in pods.values() if p.get("status", {}).get("phase") not in TERMINAL]
        now_s = now_rfc3339(now.timestamp())
        finished = finished_condition(job)
        if finished:
            self._delete_pods(live)
            self.deadlines.pop(key, None)
            return
        queued = bool((meta.get("labels") or {}).get("kueue.x-k8s.io/queue-name"))
        suspended = bool(spec.get("suspend")) or (
            queued and self.kueue is not None and not self.kueue.job_admitted(key[0], key[1])
        )
        succeeded = [p for p in pods.values() if p.get("status", {}).get("phase") == "Succeeded"]
        failed = [p for p in pods.values() if p.get("status", {}).get("phase") == "Failed"]
        # podFailurePolicy: failures it ignores (a disruption, say) count toward nothing; the
        # pod is simply replaced.
        failed = [p for p in failed if not _ignored(spec, p)]
        n_succeeded, n_failed = len(succeeded), len(failed)
        if suspended:
            self._delete_pods(live)
            self.deadlines.pop(key, None)
            status.pop("startTime", None)
            status["active"] = 0
            status["ready"] = 0
            if spec.get("suspend"):
                _set_cond(status, "Suspended", "True", "JobSuspended", "Job suspended", now_s)
            self._write(job, status)
            return
        if any(c.get("type") == "Suspended" for c in status.get("conditions") or []):
            _set_cond(status, "Suspended", "False", "JobResumed", "Job resumed", now_s)
        start = parse_time(status.get("startTime"))
        if start is None:
            start = now
            status["startTime"] = now_s
        indexed = spec.get("completionMode") == "Indexed"
        parallelism = int(spec["parallelism"]) if spec.get("parallelism") is not None else 1
        completions = spec.get("completions")
        backoff = int(spec.get("backoffLimit", 6))
        deadline_s = spec.get("activeDeadlineSeconds")
        fail_reason = fail_message = ""
        if deadline_s is not None:
            deadline = start.timestamp() + float(deadline_s)
            if now.timestamp() >= deadline:
                fail_reason, fail_message = (
                    "DeadlineExceeded",
                    "Job was active longer than specified deadline",
                )
            else:
                self.deadlines[key] = deadline
        if not fail_reason and n_failed > backoff:
            fail_reason, fail_message = (
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit",
            )
        done_indexes = sorted(
            {int(p["metadata"].get("annotations", {}).get(INDEX_KEY, -1)) for p in succeeded} - {-1}
        )
        if completions is None:
            complete = n_succeeded >= 1 and not live
        elif indexed:
            complete = len(done_indexes) >= int(completions)
        else:
            complete = n_succeeded >= int(completions)
        if not fail_reason and not complete:
            live = live + self._create_missing(
                job, live, succeeded, indexed, parallelism, completions
            )
        if fail_reason:
            self._delete_pods(live)
            live = []
            _set_cond(status, "FailureTarget", "True", fail_reason, fail_message, now_s)
            _set_cond(status, "Failed", "True", fail_reason, fail_message, now_s)
            self.deadlines.pop(key, None)
        elif complete:
            self._delete_pods(live)
            live = []
            _set_cond(status, "SuccessCriteriaMet", "True", "CompletionsReached",
                      "Reached expected number of succeeded pods", now_s)  # fmt: skip
            _set_cond(status, "Complete", "True", "CompletionsReached",
                      "Reached expected number of succeeded pods", now_s)  # fmt: skip
            status["completionTime"] = now_s
            self.deadlines.pop(key, None)
        status["active"] = len(live)
        status["ready"] = sum(1 for p in live if p.get("status", {}).get("phase") == "Running")
        status["succeeded"] = n_succeeded
        status["failed"] = n_failed
        status["terminating"] = 0
        if indexed:
            status["completedIndexes"] = compress_indexes(done_indexes)
        status.setdefault("uncountedTerminatedPods", {})
        for k in ("active", "ready", "succeeded", "failed", "terminating"):
            if not status[k]:
                status.pop(k)
        self._write(job, status)

    def _create_missing(
        self,
        job: dict,
        live: list[dict],
        succeeded: list[dict],
        indexed: bool,
        parallelism: int,
        completions,
    ) -> list[dict]:
        want = parallelism
        if completions is not None:
            if indexed:
                done = {p["metadata"].get("annotations", {}).get(INDEX_KEY) for p in succeeded}
                busy = {p["metadata"].get("annotations", {}).get(INDEX_KEY) for p in live}
                missing = [
                    i for i in range(int(completions)) if str(i) not in done and str(i) not in busy
                ]
                room = max(0, parallelism - len(live))
                return [self._create_pod(job, i) for i in missing[:room]]
            want = min(parallelism, int(completions) - len(succeeded))
        elif succeeded:
            want = 0
        return [self._create_pod(job, None) for _ in range(max(0, want - len(live)))]

    def _create_pod(self, job: dict, index: int | None) -> dict:
        meta = job["metadata"]
        uid = meta.get("uid", "")
        n = self.created.get(uid, 0)
        self.created[uid] = n + 1
        template = job.get("spec", {}).get("template") or {}
        tmeta = template.get("metadata") or {}
        labels = dict(tmeta.get("labels") or {})
        annotations = dict(tmeta.get("annotations") or {})
        for label in JOB_NAME_LABELS:
            labels[label] = meta["name"]
        for label in UID_LABELS:
            labels[label] = uid
        pod_spec = deep_copy(template.get("spec") or {})
        if index is None:
            name = f"{meta['name'][:57]}-{pod_suffix(f'{uid}/{n}')}"
        else:
            name = f"{meta['name'][:50]}-{index}-{pod_suffix(f'{uid}/{n}')}"
            labels[INDEX_KEY] = str(index)
            annotations[INDEX_KEY] = str(index)
            pod_spec.setdefault("hostname", f"{meta['name'][:50]}-{index}")
            for container in pod_spec.get("containers") or []:
                env = container.setdefault("env", [])
                if not any(e.get("name") == "JOB_COMPLETION_INDEX" for e in env):
                    env.append({"name": "JOB_COMPLETION_INDEX", "value": str(index)})
        if (meta.get("labels") or {}).get(QUEUE_LABEL) and tas.topology_request(template):
            tas.gate_pod(pod_spec, labels)
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": meta["namespace"],
                "labels": labels,
                "annotations": annotations,
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": meta["name"],
                        "uid": uid,
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": pod_spec,
            "status": {"phase": "Pending", "qosClass": "BestEffort"},
        }
        try:
            created = self.store.create(resources.PODS, pod)
            # Remember the pod now, so a later round does not create it again before its event.
            self.pods.setdefault((meta["namespace"], meta["name"]), {})[name] = created
            return created
        except Exception as exc:
            log.warning("jobs: cannot create pod %s: %s", name, exc)
            if isinstance(exc, Forbidden):  # an exceeded ResourceQuota, as the controller says
                events.record(self.store, obj=job, reason="FailedCreate",
                              message=f"Error creating: {exc.message}", component="job-controller",
                              now=self.clock.timestamp(), type_="Warning")  # fmt: skip
            return pod

    def _delete_pods(self, pods: list[dict]) -> None:
        for pod in pods:
            meta = pod["metadata"]
            with contextlib.suppress(NotFound):
                self.store.delete(resources.PODS, meta["namespace"], meta["name"])
            owner = job_owner(pod)
            if owner:
                self.pods.get((meta["namespace"], owner), {}).pop(meta["name"], None)

    def _write(self, job: dict, status: dict) -> None:
        if status == (job.get("status") or {}):
            return
        meta = job["metadata"]
        with self.store.lock:
            try:
                current = self.store.get(
                    resources.JOBS, meta["namespace"], meta["name"], copy=False
                )
            except NotFound:
                return
            if current["metadata"].get("uid") != meta.get("uid"):
                return
            new = {**current, "status": status}
            self.store.update(resources.JOBS, new, subresource="status", check_rv=False)


def _ignored(spec: dict, pod: dict) -> bool:
    """Whether the Job's podFailurePolicy ignores this failed pod (an Ignore rule whose pod
    condition the pod has; exit-code rules are not modelled)."""
    conditions = {
        c.get("type")
        for c in (pod.get("status") or {}).get("conditions") or []
        if c.get("status") == "True"
    }
    for rule in (spec.get("podFailurePolicy") or {}).get("rules") or []:
        wanted = {c.get("type") for c in rule.get("onPodConditions") or []}
        if wanted & conditions:
            return rule.get("action") == "Ignore"
    return False


def _set_cond(status: dict, ctype: str, value: str, reason: str, message: str, now: str) -> None:
    conds = status.setdefault("conditions", [])
    for cond in conds:
        if cond.get("type") == ctype:
            if cond.get("status") != value:
                cond.update(lastTransitionTime=now, lastProbeTime=now)
            cond.update(status=value, reason=reason, message=message)
            return
    conds.append(
        {
            "type": ctype,
            "status": value,
            "reason": reason,
            "message": message,
            "lastProbeTime": now,
            "lastTransitionTime": now,
        }
    )
