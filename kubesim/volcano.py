"""Volcano controller: vcjob → PodGroup, gang admission against queue capability, task pods."""

from __future__ import annotations

import contextlib
import logging
from collections import defaultdict

from kubesim import resources
from kubesim.store import AlreadyExists, NotFound, deep_copy, now_rfc3339
from kueuemodel.resources import format_units, pod_requests, to_units

log = logging.getLogger(__name__)

VCJOB_API = "batch.volcano.sh/v1alpha1"
PG_API = "scheduling.volcano.sh/v1beta1"
GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
JOB_NAME_KEY = "volcano.sh/job-name"
TASK_KEY = "volcano.sh/task-spec"
TASK_INDEX_KEY = "volcano.sh/task-index"
QUEUE_KEY = "volcano.sh/queue-name"
ABORT_ANNOTATION = "kubesim.dev/abort"
FINAL = ("Completed", "Failed", "Aborted", "Terminated")
COUNTED = ("Inqueue", "Running")


def podgroup_name(job: dict) -> str:
    """Volcano names a job's PodGroup <job name>-<job uid>."""
    return f"{job['metadata']['name']}-{job['metadata'].get('uid', '')}"


def _env_name(task: str) -> str:
    return task.upper().replace("-", "_").replace(".", "_")


class VolcanoController:
    """Volcano's job controller and the enqueue step of its scheduler."""

    def __init__(self, store, clock):
        self.store = store
        self.clock = clock
        self.jobs: dict[tuple[str, str], dict] = {}
        self.pgs: dict[tuple[str, str], dict] = {}
        self.queues: dict[str, dict] = {}
        self.pods: dict[tuple[str, str], dict[str, dict]] = {}
        self.todo: set[tuple[str, str]] = set()
        self.status_queues: set[str] = set()
        self.priorities: dict[str, int] = {}  # PriorityClass name -> value

    # ------------------------------------------------------------------ events

    def on_event(self, etype: str, rt, obj: dict) -> None:
        meta = obj["metadata"]
        deleted = etype == "DELETED"
        if rt.group == resources.VOLCANO_BATCH and rt.plural == "jobs":
            key = (meta["namespace"], meta["name"])
            if deleted:
                self.jobs.pop(key, None)
                self.status_queues.add((obj.get("spec") or {}).get("queue") or "default")
            else:
                self.jobs[key] = obj
                self.todo.add(key)
        elif rt.group == resources.VOLCANO_SCHED and rt.plural == "podgroups":
            key = (meta["namespace"], meta["name"])
            if deleted:
                self.pgs.pop(key, None)
            else:
                self.pgs[key] = obj
            self.status_queues.add((obj.get("spec") or {}).get("queue") or "default")
            # Capability is only given back when a PodGroup completes or goes away.
            if deleted or (obj.get("status") or {}).get("phase") == "Completed":
                self._wake_waiting()
        elif rt.group == resources.VOLCANO_SCHED and rt.plural == "queues":
            if deleted:
                self.queues.pop(meta["name"], None)
            else:
                old = self.queues.get(meta["name"])
                self.queues[meta["name"]] = obj
                if (
                    old is not None
                    and old.get("spec") == obj.get("spec")
                    and (
                        (old.get("status") or {}).get("state")
                        == (obj.get("status") or {}).get("state")
                    )
                ):
                    return
            self.status_queues.add(meta["name"])
            self._wake_waiting()
        elif rt.group == resources.SCHEDULING and rt.plural == "priorityclasses":
            if deleted:
                self.priorities.pop(meta["name"], None)
            else:
                self.priorities[meta["name"]] = int(obj.get("value") or 0)
        elif rt.group == "" and rt.plural == "pods":
            job = (meta.get("labels") or {}).get(JOB_NAME_KEY)
            if not job or not any(
                r.get("apiVersion") == VCJOB_API for r in meta.get("ownerReferences") or []
            ):
                return
            key = (meta["namespace"], job)
            pods = self.pods.setdefault(key, {})
            if deleted:
                pods.pop(meta["name"], None)
            else:
                pods[meta["name"]] = obj
            self.todo.add(key)

    def _wake_waiting(self) -> None:
        for key, job in self.jobs.items():
            if ((job.get("status") or {}).get("state") or {}).get("phase") in (None, "Pending"):
                self.todo.add(key)

    # ------------------------------------------------------------------ setup

    def ensure_default_queues(self) -> None:
        """Create Volcano's `root` and `default` queues when absent."""
        for name, spec in (
            ("root", {"weight": 1, "reclaimable": False}),
            ("default", {"weight": 1, "reclaimable": True, "parent": "root"}),
        ):
            with contextlib.suppress(AlreadyExists):
                self.store.create(
                    resources.VOLCANO_QUEUES,
                    {
                        "apiVersion": PG_API,
                        "kind": "Queue",
                        "metadata": {"name": name},
                        "spec": spec,
                    },
                )

    # ------------------------------------------------------------------ reconcile

    def reconcile(self) -> None:
        todo, self.todo = self.todo, set()
        for key in sorted(todo, key=self._order):
            if key not in self.jobs:
                continue
            try:
                job = self.store.get(resources.VCJOBS, key[0], key[1], copy=False)
            except NotFound:
                continue
            try:
                self._sync(job)
            except Exception:
                log.exception("volcano: syncing job %s/%s failed", *key)

    def _order(self, key: tuple[str, str]) -> tuple:
        """Volcano's job order: higher priority (its PriorityClass value, 0 when none or not
        found) first, then earlier creation, then uid; jobs woken together are enqueued so."""
        job = self.jobs.get(key) or {"metadata": {}}
        meta, spec = job["metadata"], job.get("spec") or {}
        priority = self.priorities.get(spec.get("priorityClassName") or "", 0)
        return (-priority, meta.get("creationTimestamp", ""), meta.get("uid", ""), key)

    def _sync(self, job: dict) -> None:
        meta, spec = job["metadata"], job.get("spec") or {}
        key = (meta["namespace"], meta["name"])
        phase = ((job.get("status") or {}).get("state") or {}).get("phase") or "Pending"
        if phase in FINAL:
            return
        tasks = spec.get("tasks") or []
        total = sum(int(t.get("replicas", 1)) for t in tasks)
        min_available = int(spec.get("minAvailable", total))
        pg_key = (meta["namespace"], podgroup_name(job))
        pg = self.pgs.get(pg_key)
        if pg is None:
            pg = self._create_podgroup(job, tasks, min_available)
            if pg is None:
                return
        pg_phase = (pg.get("status") or {}).get("phase") or "Pending"
        if pg_phase == "Pending":
            reason = self._admission_blocker(pg)
            if reason:
                self._set_pg_status(pg, "Pending", reason)
                self._write_job(job, "Pending", min_available, {}, tasks)
                return
            pg = self._set_pg_status(pg, "Inqueue", "")
            pg_phase = "Inqueue"
        pods = self.pods.get(key, {})
        retries = int((job.get("status") or {}).get("retryCount") or 0)
        if not pods and (pg_phase == "Inqueue" or phase == "Restarting"):
            self._create_pods(job, tasks, pg_key[1])
            if phase == "Restarting":
                self._write_job(job, "Pending", min_available, {}, tasks, retries=retries)
            return
        counts = defaultdict(int)
        per_task: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for pod in pods.values():
            p = (pod.get("status") or {}).get("phase") or "Pending"
            counts[p] += 1
            task = (pod["metadata"].get("labels") or {}).get(TASK_KEY, "")
            per_task[task][p] += 1
        running, succeeded, failed = counts["Running"], counts["Succeeded"], counts["Failed"]
        min_success = int(spec.get("minSuccess", min_available))
        new_phase = ""
        if (meta.get("annotations") or {}).get(ABORT_ANNOTATION) == "true":
            new_phase = "Aborted"
        elif failed:
            action = self._failure_action(spec, tasks, per_task)
            if action == "AbortJob":
                new_phase = "Aborted"
            elif action == "TerminateJob":
                new_phase = "Terminated"
            elif action == "RestartJob":
                if retries < int(spec.get("maxRetry", 3)):
                    # The whole gang starts again: every pod goes, the PodGroup keeps its place.
                    self._delete_pods(list(pods.values()))
                    self._write_job(job, "Restarting", min_available, counts, tasks, per_task,
                                    retries=retries + 1)  # fmt: skip
                    self.todo.add(key)
                    return
                new_phase = "Failed"
        if new_phase:
            self._delete_pods([p for p in pods.values() if _live(p)])
            self._set_pg_status(pg, "Completed", "")
        elif succeeded + failed >= total and total:
            new_phase = "Completed" if succeeded >= min_success else "Failed"
            self._set_pg_status(pg, "Completed", "")
        elif running + succeeded >= min_available and running:
            new_phase = "Running"
            if pg_phase != "Running":
                self._set_pg_status(pg, "Running", "")
        else:
            new_phase = "Running" if phase == "Running" else "Pending"
        self._write_job(job, new_phase, min_available, counts, tasks, per_task, retries=retries)

    def _failure_action(self, spec: dict, tasks: list[dict], per_task) -> str:
        for policies, task in [(spec.get("policies") or [], None)] + [
            (t.get("policies") or [], t.get("name")) for t in tasks
        ]:
            if task is not None and not per_task.get(task, {}).get("Failed"):
                continue
            for policy in policies:
                events = list(policy.get("events") or []) + [policy.get("event")]
                if "PodFailed" in events or "*" in events:
                    return policy.get("action") or ""
        return ""

    # ------------------------------------------------------------------ admission

    def _queue_allocated(self) -> dict[str, dict[str, int]]:
        used: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for pg in self.pgs.values():
            if (pg.get("status") or {}).get("phase") not in COUNTED:
                continue
            queue = (pg.get("spec") or {}).get("queue") or "default"
            for res, value in ((pg.get("spec") or {}).get("minResources") or {}).items():
                used[queue][res] += to_units(res, value)
        return used

    def _ancestors(self, name: str) -> list[str]:
        chain, seen = [], set()
        while name and name not in seen:
            seen.add(name)
            chain.append(name)
            queue = self.queues.get(name)
            if queue is None:
                break
            parent = (queue.get("spec") or {}).get("parent")
            name = parent or ("root" if name != "root" and "root" in self.queues else "")
        return chain

    def _admission_blocker(self, pg: dict) -> str:
        """Why the PodGroup cannot be enqueued yet ("" when it can)."""
        spec = pg.get("spec") or {}
        queue_name = spec.get("queue") or "default"
        queue = self.queues.get(queue_name)
        if queue is None:
            return f"queue {queue_name} not found"
        state = (queue.get("status") or {}).get("state") or "Open"
        if state != "Open":
            return f"queue {queue_name} is {state.lower()}"
        need = {r: to_units(r, v) for r, v in (spec.get("minResources") or {}).items()}
        allocated = self._queue_allocated()
        children = defaultdict(list)
        for name, q in self.queues.items():
            parent = (q.get("spec") or {}).get("parent") or ("root" if name != "root" else "")
            if parent:
                children[parent].append(name)
        for name in self._ancestors(queue_name):
            queue = self.queues.get(name) or {}
            capability = (queue.get("spec") or {}).get("capability") or {}
            used = self._subtree_usage(name, allocated, children)
            for res, value in capability.items():
                if need.get(res, 0) + used.get(res, 0) > to_units(res, value):
                    return (
                        f"queue resource quota insufficient: queue {name} {res} capability "
                        f"{value}, allocated {format_units(res, used.get(res, 0))}, "
                        f"requested {format_units(res, need.get(res, 0))}"
                    )
        return ""

    def _subtree_usage(self, name, allocated, children) -> dict[str, int]:
        total: dict[str, int] = defaultdict(int)
        stack, seen = [name], set()
        while stack:
            current = stack.pop()
            if current in seen:
                continue
            seen.add(current)
            for res, units in allocated.get(current, {}).items():
                total[res] += units
            stack.extend(children.get(current, []))
        return total

    # ------------------------------------------------------------------ writes

    def _create_podgroup(self, job: dict, tasks: list[dict], min_available: int) -> dict | None:
        meta, spec = job["metadata"], job.get("spec") or {}
        min_resources: dict[str, int] = defaultdict(int)
        remaining = min_available
        for task in tasks:
            per_pod = pod_requests(((task.get("template") or {}).get("spec")) or {})
            take = min(remaining, int(task.get("replicas", 1)))
            for res, units in per_pod.items():
                min_resources[res] += units * take
            remaining -= take
        pg_spec = {
            "minMember": min_available,
            "minResources": {r: format_units(r, u) for r, u in min_resources.items()},
            "queue": spec.get("queue") or "default",
            "minTaskMember": {
                t.get("name", ""): int(t.get("minAvailable", t.get("replicas", 1))) for t in tasks
            },
        }
        if spec.get("priorityClassName"):
            pg_spec["priorityClassName"] = spec["priorityClassName"]
        obj = {
            "apiVersion": PG_API,
            "kind": "PodGroup",
            "metadata": {
                "name": podgroup_name(job),
                "namespace": meta["namespace"],
                "labels": {JOB_NAME_KEY: meta["name"]},
                "annotations": {},
                "ownerReferences": [_owner(job)],
            },
            "spec": pg_spec,
            "status": {"phase": "Pending"},
        }
        try:
            created = self.store.create(resources.PODGROUPS, obj)
        except AlreadyExists:
            created = self.store.get(
                resources.PODGROUPS, meta["namespace"], obj["metadata"]["name"]
            )
        except Exception as exc:
            log.warning("volcano: cannot create podgroup for %s: %s", meta["name"], exc)
            return None
        self.pgs[(meta["namespace"], created["metadata"]["name"])] = created
        return created

    def _set_pg_status(self, pg: dict, phase: str, message: str) -> dict:
        status = deep_copy(pg.get("status") or {})
        now = now_rfc3339(self.clock.timestamp())
        status["phase"] = phase
        conds = [c for c in status.get("conditions") or [] if c.get("type") != "Unschedulable"]
        if message:
            conds.append(
                {
                    "type": "Unschedulable",
                    "status": "True",
                    "reason": "NotEnoughResources",
                    "message": message,
                    "lastTransitionTime": now,
                    "transitionID": "",
                }
            )
        status["conditions"] = conds
        if status == (pg.get("status") or {}):
            return pg
        meta = pg["metadata"]
        with self.store.lock:
            try:
                current = self.store.get(resources.PODGROUPS, meta["namespace"], meta["name"])
            except NotFound:
                return pg
            current["status"] = status
            # PodGroup has no status subresource in Volcano's CRD: update the whole object.
            new = self.store.update(
                resources.PODGROUPS, current, subresource="all", check_rv=False,
                manager="vc-controller-manager",
            )  # fmt: skip
        self.pgs[(meta["namespace"], meta["name"])] = new
        self.status_queues.add((pg.get("spec") or {}).get("queue") or "default")
        return new

    def _create_pods(self, job: dict, tasks: list[dict], pg_name: str) -> None:
        meta, spec = job["metadata"], job.get("spec") or {}
        queue = spec.get("queue") or "default"
        plugins = spec.get("plugins") or {}
        hosts_env = []
        if "svc" in plugins or "pytorch" in plugins or "mpi" in plugins:
            for task in tasks:
                tname = task.get("name", "")
                hosts = [
                    f"{meta['name']}-{tname}-{i}.{meta['name']}"
                    for i in range(int(task.get("replicas", 1)))
                ]
                hosts_env.append({"name": f"VC_{_env_name(tname)}_HOSTS", "value": ",".join(hosts)})
                hosts_env.append({"name": f"VC_{_env_name(tname)}_NUM", "value": str(len(hosts))})
        for task in tasks:
            tname = task.get("name", "")
            template = task.get("template") or {}
            for index in range(int(task.get("replicas", 1))):
                name = f"{meta['name']}-{tname}-{index}"
                tmeta = template.get("metadata") or {}
                labels = {
                    **(tmeta.get("labels") or {}),
                    JOB_NAME_KEY: meta["name"],
                    "volcano.sh/job-namespace": meta["namespace"],
                    QUEUE_KEY: queue,
                    TASK_KEY: tname,
                    TASK_INDEX_KEY: str(index),
                }
                annotations = {
                    **(tmeta.get("annotations") or {}),
                    GROUP_ANNOTATION: pg_name,
                    JOB_NAME_KEY: meta["name"],
                    TASK_KEY: tname,
                    TASK_INDEX_KEY: str(index),
                    "volcano.sh/job-version": "0",
                    QUEUE_KEY: queue,
                }
                pod_spec = deep_copy(template.get("spec") or {})
                pod_spec["schedulerName"] = spec.get("schedulerName") or "volcano"
                if spec.get("priorityClassName") and not pod_spec.get("priorityClassName"):
                    pod_spec["priorityClassName"] = spec["priorityClassName"]
                if "svc" in plugins:
                    pod_spec.setdefault("hostname", name)
                    pod_spec.setdefault("subdomain", meta["name"])
                for container in pod_spec.get("containers") or []:
                    env = container.setdefault("env", [])
                    env.extend(
                        [
                            {"name": "VK_TASK_INDEX", "value": str(index)},
                            {"name": "VC_TASK_INDEX", "value": str(index)},
                            *deep_copy(hosts_env),
                        ]
                    )
                pod = {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": name,
                        "namespace": meta["namespace"],
                        "labels": labels,
                        "annotations": annotations,
                        "ownerReferences": [_owner(job)],
                    },
                    "spec": pod_spec,
                    "status": {"phase": "Pending"},
                }
                try:
                    created = self.store.create(resources.PODS, pod)
                    self.pods.setdefault((meta["namespace"], meta["name"]), {})[name] = created
                except AlreadyExists:
                    continue
                except Exception as exc:
                    log.warning("volcano: cannot create pod %s: %s", name, exc)

    def _delete_pods(self, pods: list[dict]) -> None:
        for pod in pods:
            meta = pod["metadata"]
            with contextlib.suppress(NotFound):
                self.store.delete(resources.PODS, meta["namespace"], meta["name"])
            job = (meta.get("labels") or {}).get(JOB_NAME_KEY)
            self.pods.get((meta["namespace"], job), {}).pop(meta["name"], None)

    def _write_job(
        self, job, phase, min_available, counts, tasks, per_task=None, *, retries: int = 0
    ) -> None:
        old = job.get("status") or {}
        now = now_rfc3339(self.clock.timestamp())
        old_state = old.get("state") or {}
        state = (
            dict(old_state)
            if old_state.get("phase") == phase
            else {"phase": phase, "lastTransitionTime": now}
        )
        status = {
            "state": state,
            "minAvailable": min_available,
            "pending": counts.get("Pending", 0),
            "running": counts.get("Running", 0),
            "succeeded": counts.get("Succeeded", 0),
            "failed": counts.get("Failed", 0),
            "terminating": 0,
            "unknown": 0,
            "version": 0,
            "retryCount": retries,
            "taskStatusCount": {
                task: {"phase": {p: n for p, n in phases.items() if n}}
                for task, phases in (per_task or {}).items()
            },
            "conditions": list(old.get("conditions") or []),
        }
        if not status["conditions"] or status["conditions"][-1].get("status") != phase:
            status["conditions"].append({"status": phase, "lastTransitionTime": now})
        if phase == "Running" and "runningDuration" in old:
            status["runningDuration"] = old["runningDuration"]
        if status == old:
            return
        meta = job["metadata"]
        with self.store.lock:
            try:
                current = self.store.get(resources.VCJOBS, meta["namespace"], meta["name"])
            except NotFound:
                return
            if current["metadata"].get("uid") != meta.get("uid"):
                return
            current["status"] = status
            new = self.store.update(resources.VCJOBS, current, subresource="status", check_rv=False)
        self.jobs[(meta["namespace"], meta["name"])] = new
        if phase in FINAL:
            self.status_queues.add((job.get("spec") or {}).get("queue") or "default")

    def write_statuses(self) -> None:
        """Queue status: state, podgroup counts per phase, allocated resources."""
        names, self.status_queues = self.status_queues, set()
        if not names:
            return
        allocated = self._queue_allocated()
        phases: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for pg in self.pgs.values():
            queue = (pg.get("spec") or {}).get("queue") or "default"
            phases[queue][(pg.get("status") or {}).get("phase") or "Pending"] += 1
        for name in sorted(names):
            queue = self.queues.get(name)
            if queue is None:
                continue
            old = queue.get("status") or {}
            state = old.get("state") if old.get("state") in ("Closed", "Closing") else "Open"
            status = {
                **old,
                "state": state,
                "pending": phases[name]["Pending"],
                "inqueue": phases[name]["Inqueue"],
                "running": phases[name]["Running"],
                "completed": phases[name]["Completed"],
                "unknown": phases[name]["Unknown"],
                "allocated": {r: format_units(r, u) for r, u in allocated.get(name, {}).items()},
            }
            if status == old:
                continue
            with self.store.lock:
                try:
                    current = self.store.get(resources.VOLCANO_QUEUES, None, name)
                except NotFound:
                    continue
                current["status"] = status
                self.store.update(
                    resources.VOLCANO_QUEUES, current, subresource="status", check_rv=False
                )


def _owner(job: dict) -> dict:
    return {
        "apiVersion": VCJOB_API,
        "kind": "Job",
        "name": job["metadata"]["name"],
        "uid": job["metadata"].get("uid", ""),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _live(pod: dict) -> bool:
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
