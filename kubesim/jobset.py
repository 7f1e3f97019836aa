"""JobSet's controller (jobset.x-k8s.io/v1alpha2), as kubesim runs it.

Each replicated job `rj` with `replicas: n` becomes n child batch/v1 Jobs `<jobset>-<rj>-<i>`,
owned by the JobSet and labelled as JobSet labels them (`jobset.sigs.k8s.io/jobset-name`,
`replicatedjob-name`, `job-index`, `replicatedjob-replicas`, `restart-attempt`, on the Job and
its pod template); with `network.enableDNSHostnames` (the default) the pods get the subdomain
(`network.subdomain`, else the JobSet's name) and a headless Service of that name selects them, so
every pod is reachable as `<jobset>-<rj>-<i>-<pod index>.<subdomain>`. kubesim's Job controller
runs the children.

Status: `replicatedJobsStatus` (ready, succeeded, failed, active, suspended child Jobs per
replicated job) and the conditions. The success policy (`operator` All or Any over
`targetReplicatedJobs`, default all) completes the JobSet (Completed, terminalState Completed); a
failed child Job restarts the whole JobSet (every child deleted and created again,
`status.restarts` + 1) while `failurePolicy.maxRestarts` allows, else fails it (Failed,
terminalState Failed; reason ReachedMaxRestarts, or FailedJobs without a failure policy). A
finished JobSet deletes its children that still run. Suspending it (as Kueue does while it is
not admitted) deletes its children; resuming creates them again from the templates as they are
then (with the flavor's node labels Kueue put there).
"""

from __future__ import annotations

import contextlib
import logging

from kubesim import resources
from kubesim.jobs import _set_cond, finished_condition
from kubesim.store import AlreadyExists, NotFound, deep_copy, now_rfc3339

log = logging.getLogger(__name__)

PREFIX = "jobset.sigs.k8s.io/"
LABEL_JOBSET = PREFIX + "jobset-name"
LABEL_RJ = PREFIX + "replicatedjob-name"
LABEL_INDEX = PREFIX + "job-index"
LABEL_REPLICAS = PREFIX + "replicatedjob-replicas"
LABEL_ATTEMPT = PREFIX + "restart-attempt"


def _failed_time(job: dict) -> str:
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Failed" and cond.get("status") == "True":
            return cond.get("lastTransitionTime") or ""
    return ""


def _owner(job: dict) -> str | None:
    for ref in job["metadata"].get("ownerReferences") or []:
        if ref.get("kind") == "JobSet" and ref.get("controller"):
            return ref.get("name")
    return None


class JobSetController:
    def __init__(self, store, clock):
        self.store = store
        self.clock = clock
        self.jobsets: set[tuple[str, str]] = set()
        self.children: dict[tuple[str, str], dict[str, dict]] = {}
        self.todo: set[tuple[str, str]] = set()

    def on_event(self, etype: str, rt, obj: dict) -> None:
        meta = obj["metadata"]
        if rt.storage_key == resources.JOBSETS.storage_key:
            key = (meta["namespace"], meta["name"])
            if etype == "DELETED":
                self.jobsets.discard(key)
            else:
                self.jobsets.add(key)
            self.todo.add(key)
        elif rt.storage_key == resources.JOBS.storage_key and (owner := _owner(obj)):
            key = (meta["namespace"], owner)
            children = self.children.setdefault(key, {})
            if etype == "DELETED":
                children.pop(meta["name"], None)
            else:
                children[meta["name"]] = obj
            self.todo.add(key)

    def reconcile(self) -> None:
        todo, self.todo = self.todo, set()
        for key in sorted(todo):
            if key not in self.jobsets:
                continue
            try:
                jobset = self.store.get(resources.JOBSETS, key[0], key[1])
            except NotFound:
                continue
            try:
                self._sync(jobset)
            except Exception:
                log.exception("jobset: syncing %s/%s failed", *key)

    def _sync(self, jobset: dict) -> None:
        meta, spec = jobset["metadata"], jobset.get("spec") or {}
        key = (meta["namespace"], meta["name"])
        status = deep_copy(jobset.get("status") or {})
        now = now_rfc3339(self.clock.timestamp())
        attempt = int(status.get("restarts") or 0)
        children = {
            name: job
            for name, job in self.children.get(key, {}).items()
            if (job["metadata"].get("labels") or {}).get(LABEL_ATTEMPT) == str(attempt)
        }
        stale = [j for j in self.children.get(key, {}).values() if j not in children.values()]
        self._delete(stale)
        if status.get("terminalState"):
            self._delete([j for j in children.values() if not finished_condition(j)])
            self._write(jobset, status)
            return
        if spec.get("suspend"):
            self._delete(list(children.values()))
            _set_cond(status, "Suspended", "True", "SuspendedJobs", "jobset is suspended", now)
            status["replicatedJobsStatus"] = [
                {"name": rj["name"], "ready": 0, "succeeded": 0, "failed": 0, "active": 0,
                 "suspended": 0}
                for rj in spec.get("replicatedJobs") or []
            ]  # fmt: skip
            self._write(jobset, status)
            return
        if any(c.get("type") == "Suspended" for c in status.get("conditions") or []):
            _set_cond(status, "Suspended", "False", "ResumeJobs", "jobset is resumed", now)
        self._ensure_service(jobset)
        rj_status = []
        failed = False
        failed_at: list[tuple[str, str]] = []  # (when, name) of the failed child Jobs
        done: dict[str, tuple[int, int]] = {}  # rj -> (succeeded, replicas)
        for rj in spec.get("replicatedJobs") or []:
            replicas = int(rj.get("replicas", 1))
            counts = {"ready": 0, "succeeded": 0, "failed": 0, "active": 0, "suspended": 0}
            for index in range(replicas):
                name = f"{meta['name']}-{rj['name']}-{index}"
                child = children.get(name)
                if child is None:
                    child = self._create(jobset, rj, index, attempt)
                    if child is None:
                        continue
                state = finished_condition(child)
                child_status = child.get("status") or {}
                if state == "Complete":
                    counts["succeeded"] += 1
                elif state == "Failed":
                    counts["failed"] += 1
                    failed = True
                    failed_at.append((_failed_time(child), name))
                else:
                    counts["active"] += 1
                    parallelism = int((child.get("spec") or {}).get("parallelism", 1))
                    if int(child_status.get("ready") or 0) >= parallelism:
                        counts["ready"] += 1
            rj_status.append({"name": rj["name"], **counts})
            done[rj["name"]] = (counts["succeeded"], replicas)
        status["replicatedJobsStatus"] = rj_status
        policy = spec.get("successPolicy") or {}
        targets = policy.get("targetReplicatedJobs") or list(done)
        if policy.get("operator") == "Any":
            succeeded = any(done.get(t, (0, 0))[0] > 0 for t in targets)
        else:
            succeeded = all(done.get(t, (0, 1))[0] >= done.get(t, (0, 1))[1] for t in targets)
        max_restarts = int((spec.get("failurePolicy") or {}).get("maxRestarts") or 0)
        if failed and attempt < max_restarts:
            self._delete(list(children.values()))
            status["restarts"] = attempt + 1
        elif failed and "failurePolicy" in spec:
            # JobSet names the child Job that failed first.
            first = min(failed_at)[1]
            _set_cond(status, "Failed", "True", "ReachedMaxRestarts",
                      "jobset failed due to reaching max number of restarts (first failed job: "
                      f"{first})", now)  # fmt: skip
            status["terminalState"] = "Failed"
        elif failed:
            # Without a failure policy the set fails at its first failed child.
            _set_cond(status, "Failed", "True", "FailedJobs",
                      "jobset failed due to one or more job failures", now)  # fmt: skip
            status["terminalState"] = "Failed"
        elif succeeded:
            _set_cond(status, "Completed", "True", "AllJobsCompleted",
                      "jobset completed successfully", now)  # fmt: skip
            status["terminalState"] = "Completed"
        if status.get("terminalState"):
            self._delete([j for j in children.values() if not finished_condition(j)])
        self._write(jobset, status)

    def _labels(self, jobset: dict, rj: dict, index: int, attempt: int) -> dict[str, str]:
        return {
            LABEL_JOBSET: jobset["metadata"]["name"],
            LABEL_RJ: rj["name"],
            LABEL_INDEX: str(index),
            LABEL_REPLICAS: str(int(rj.get("replicas", 1))),
            LABEL_ATTEMPT: str(attempt),
        }

    def _subdomain(self, jobset: dict) -> str | None:
        network = (jobset.get("spec") or {}).get("network") or {}
        if network.get("enableDNSHostnames", True) is False:
            return None
        return network.get("subdomain") or jobset["metadata"]["name"]

    def _create(self, jobset: dict, rj: dict, index: int, attempt: int) -> dict | None:
        meta = jobset["metadata"]
        template = deep_copy(rj.get("template") or {})
        ours = self._labels(jobset, rj, index, attempt)
        tmeta = template.get("metadata") or {}
        job_spec = template.get("spec") or {}
        pod_template = job_spec.setdefault("template", {})
        pod_meta = pod_template.setdefault("metadata", {})
        pod_meta["labels"] = {**(pod_meta.get("labels") or {}), **ours}
        pod_meta["annotations"] = {**(pod_meta.get("annotations") or {}), **ours}
        if subdomain := self._subdomain(jobset):
            pod_template.setdefault("spec", {})["subdomain"] = subdomain
        job_spec.pop("suspend", None)
        # JobSet's webhook makes every child Job Indexed (its pods get stable hostnames).
        job_spec.setdefault("completionMode", "Indexed")
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": f"{meta['name']}-{rj['name']}-{index}",
                "namespace": meta["namespace"],
                "labels": {**(tmeta.get("labels") or {}), **ours},
                "annotations": {**(tmeta.get("annotations") or {}), **ours},
                "ownerReferences": [{
                    "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                    "name": meta["name"], "uid": meta.get("uid", ""), "controller": True,
                    "blockOwnerDeletion": True,
                }],
            },
            "spec": job_spec,
        }  # fmt: skip
        try:
            created = self.store.create(resources.JOBS, job)
        except AlreadyExists:
            return None
        except Exception as exc:
            log.warning("jobset: cannot create job %s: %s", job["metadata"]["name"], exc)
            return None
        self.children.setdefault((meta["namespace"], meta["name"]), {})[
            created["metadata"]["name"]
        ] = created
        return created

    def _ensure_service(self, jobset: dict) -> None:
        subdomain = self._subdomain(jobset)
        if not subdomain:
            return
        meta = jobset["metadata"]
        service = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": subdomain,
                "namespace": meta["namespace"],
                "ownerReferences": [{
                    "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                    "name": meta["name"], "uid": meta.get("uid", ""), "controller": True,
                }],
            },
            "spec": {
                "clusterIP": "None",
                "publishNotReadyAddresses": True,
                "selector": {LABEL_JOBSET: meta["name"]},
            },
        }  # fmt: skip
        with contextlib.suppress(AlreadyExists):
            self.store.create(resources.SERVICES, service)

    def _delete(self, jobs: list[dict]) -> None:
        for job in jobs:
            meta = job["metadata"]
            with contextlib.suppress(NotFound):
                self.store.delete(resources.JOBS, meta["namespace"], meta["name"])
            owner = _owner(job)
            if owner:
                self.children.get((meta["namespace"], owner), {}).pop(meta["name"], None)

    def _write(self, jobset: dict, status: dict) -> None:
        if status == (jobset.get("status") or {}):
            return
        meta = jobset["metadata"]
        with self.store.lock:
            try:
                current = self.store.get(
                    resources.JOBSETS, meta["namespace"], meta["name"], copy=False
                )
            except NotFound:
                return
            if current["metadata"].get("uid") != meta.get("uid"):
                return
            self.store.update(
                resources.JOBSETS, {**current, "status": status}, subresource="status",
                check_rv=False,
            )  # fmt: skip
