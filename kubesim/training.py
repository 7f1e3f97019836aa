"""Kubeflow training-operator's PyTorchJob controller (kubeflow.org/v1), as kubesim runs it.

For each replica type (Master, Worker) and index it keeps a pod `<job>-<type>-<i>` and a headless
Service of the same name, with the operator's labels (`training.kubeflow.org/job-name`,
`replica-type`, `replica-index`, `job-role: master`) and the rendezvous environment torchrun
reads: MASTER_ADDR (the master's Service), MASTER_PORT (the master container's port named
`pytorchjob-port`, else 23456), WORLD_SIZE (all replicas) and RANK (master 0, worker i + 1).
Status: Created, Running, Succeeded (the master succeeded, or every worker when there is no
master), Suspended (`runPolicy.suspend`: pods are deleted, as for Kueue's queueing);
replicaStatuses with active/succeeded/failed per type; startTime and completionTime. A replica
type's `restartPolicy` (default OnFailure) decides what a failure does, as in the training
operator v1.9: `Never` fails the job on the first failed replica (backoffLimit does not apply);
`OnFailure`/`Always` pods restart their containers in place (kubesim's kubelet) and the job fails
once their restarts reach `runPolicy.backoffLimit`; `ExitCode` pods run with restartPolicy
Never, a retryable exit code (128 and up) has the pod replaced under its name (Restarting) and a
permanent one fails the job. `activeDeadlineSeconds` fails the job too. `cleanPodPolicy` Running
or All deletes the pods still running once the job has finished. Messages name the job without
its namespace, as the operator's do.
"""

from __future__ import annotations

import contextlib
import logging

from kubesim import resources
from kubesim.jobs import _set_cond
from kubesim.store import AlreadyExists, NotFound, deep_copy, now_rfc3339

log = logging.getLogger(__name__)

LABEL_JOB = "training.kubeflow.org/job-name"
LABEL_TYPE = "training.kubeflow.org/replica-type"
LABEL_INDEX = "training.kubeflow.org/replica-index"
LABEL_ROLE = "training.kubeflow.org/job-role"
LABEL_OPERATOR = "training.kubeflow.org/operator-name"
DEFAULT_PORT = 23456
PORT_NAME = "pytorchjob-port"
CONTAINER = "pytorch"
TERMINAL = ("Succeeded", "Failed")


def _owner(pod: dict) -> str | None:
    for ref in pod["metadata"].get("ownerReferences") or []:
        if ref.get("kind") == "PyTorchJob" and ref.get("controller"):
            return ref.get("name")
    return None


class PyTorchJobController:
    def __init__(self, store, clock):
        self.store = store
        self.clock = clock
        self.jobs: dict[tuple[str, str], dict] = {}
        self.pods: dict[tuple[str, str], dict[str, dict]] = {}
        self.todo: set[tuple[str, str]] = set()

    def on_event(self, etype: str, rt, obj: dict) -> None:
        meta = obj["metadata"]
        if rt.storage_key == resources.PYTORCHJOBS.storage_key:
            key = (meta["namespace"], meta["name"])
            if etype == "DELETED":
                self.jobs.pop(key, None)
            else:
                self.jobs[key] = obj
            self.todo.add(key)
        elif rt.group == "" and rt.plural == "pods" and (owner := _owner(obj)):
            key = (meta["namespace"], owner)
            pods = self.pods.setdefault(key, {})
            if etype == "DELETED":
                pods.pop(meta["name"], None)
            else:
                pods[meta["name"]] = obj
            self.todo.add(key)

    def reconcile(self) -> None:
        todo, self.todo = self.todo, set()
        for key in sorted(todo):
            if key not in self.jobs:
                continue
            try:
                job = self.store.get(resources.PYTORCHJOBS, key[0], key[1])
            except NotFound:
                continue
            try:
                self._sync(job)
            except Exception:
                log.exception("pytorchjob: syncing %s/%s failed", *key)

    # ------------------------------------------------------------------------------

    def _sync(self, job: dict) -> None:
        meta, spec = job["metadata"], job.get("spec") or {}
        key = (meta["namespace"], meta["name"])
        status = deep_copy(job.get("status") or {})
        now = now_rfc3339(self.clock.timestamp())
        short = meta["name"]  # the operator's messages name the job without its namespace
        run = spec.get("runPolicy") or {}
        replicas = spec.get("pytorchReplicaSpecs") or {}
        pods = self.pods.get(key, {})
        live = [p for p in pods.values() if (p.get("status") or {}).get("phase") not in TERMINAL]
        if not status.get("conditions"):
            _set_cond(status, "Created", "True", "PyTorchJobCreated",
                      f"PyTorchJob {meta['name']} is created.", now)  # fmt: skip
        if _finished(status):
            if run.get("cleanPodPolicy") in ("Running", "All"):
                self._delete(live)
            self._write(job, status)
            return
        if run.get("suspend"):
            self._delete(list(pods.values()))
            status.pop("startTime", None)
            _set_cond(status, "Running", "False", "PyTorchJobSuspended",
                      f"PyTorchJob {short} is suspended.", now)  # fmt: skip
            _set_cond(status, "Suspended", "True", "PyTorchJobSuspended",
                      f"PyTorchJob {short} is suspended.", now)  # fmt: skip
            status["replicaStatuses"] = {rtype: {} for rtype in replicas}
            self._write(job, status)
            return
        if any(c.get("type") == "Suspended" for c in status.get("conditions") or []):
            _set_cond(status, "Suspended", "False", "PyTorchJobResumed",
                      f"PyTorchJob {short} is resumed.", now)  # fmt: skip
        status.setdefault("startTime", now)
        world = sum(int(rs.get("replicas", 1)) for rs in replicas.values())
        counts: dict[str, dict[str, int]] = {}
        # The restarts in place of OnFailure/Always replicas count against backoffLimit; a
        # Never replica's failure fails the job, an ExitCode replica's retryable exit code
        # (128 and up) has its pod replaced and a permanent one fails the job.
        backoff = run.get("backoffLimit")
        restarts = sum(
            int(cs.get("restartCount") or 0)
            for p in live
            if _policy(replicas, _type_of(p)) in ("OnFailure", "Always")
            for cs in (p.get("status") or {}).get("containerStatuses") or []
        )
        past_backoff = backoff is not None and restarts >= int(backoff) > 0
        deadline = run.get("activeDeadlineSeconds")
        started = _seconds(status["startTime"])
        overdue = deadline is not None and self.clock.timestamp() - started >= float(deadline)
        stop = past_backoff or overdue
        permanent: str | None = None  # the replica type of a permanent ExitCode failure
        restarting: list[tuple[str, int]] = []
        for rtype, rs in replicas.items():
            tally = {"active": 0, "succeeded": 0, "failed": 0}
            policy = _policy(replicas, rtype)
            retried = 0
            for index in range(int(rs.get("replicas", 1))):
                pod_name = f"{meta['name']}-{rtype.lower()}-{index}"
                pod = pods.get(pod_name)
                phase = (pod or {}).get("status", {}).get("phase")
                if phase == "Succeeded":
                    tally["succeeded"] += 1
                elif phase == "Failed":
                    tally["failed"] += 1
                    if policy == "ExitCode" and _exit_code(pod) >= 128 and not stop:
                        self._delete([pod])  # recreated below under its name
                        retried += 1
                        pod = None
                    elif policy == "ExitCode":
                        permanent = permanent or rtype
                elif pod is not None:
                    tally["active"] += 1
                if pod is None and not stop:
                    self._create(job, rtype, rs, index, world, replicas)
                    tally["active"] += 1
            if retried:
                restarting.append((rtype, retried))
            counts[rtype] = tally
        status["replicaStatuses"] = {
            rtype: {k: v for k, v in tally.items() if v}
            | {"selector": f"{LABEL_JOB}={meta['name']},{LABEL_TYPE}={rtype.lower()}"}
            for rtype, tally in counts.items()
        }
        running = any((p.get("status") or {}).get("phase") == "Running" for p in live)
        master = counts.get("Master")
        if master is not None:
            succeeded = master["succeeded"] >= int(replicas["Master"].get("replicas", 1))
        else:
            succeeded = all(
                counts[t]["succeeded"] >= int(rs.get("replicas", 1)) for t, rs in replicas.items()
            )
        failed_type = next((t for t, c in counts.items() if c["failed"]), None)
        if overdue:
            self._fail(status, "PyTorchJobFailed", f"Job {short} has failed because it was "
                       "active longer than specified deadline", now)  # fmt: skip
        elif past_backoff:
            self._fail(status, "PyTorchJobFailed", f"Job {short} has failed because it has "
                       "reached the specified backoff limit", now)  # fmt: skip
        elif permanent:
            self._fail(status, "PyTorchJobFailed", f'job "{short}" is failing because '
                       f'"{permanent}" replica(s) failed.', now)  # fmt: skip
        elif restarting:
            rtype, n = restarting[0]
            _set_cond(status, "Restarting", "True", "PyTorchJobRestarting",
                      f"PyTorchJob {short} is restarting because {n} {rtype} replica(s) "
                      "failed.", now)  # fmt: skip
        elif failed_type and _policy(replicas, failed_type) != "ExitCode":
            self._fail(status, "PyTorchJobFailed",
                       f"PyTorchJob {short} is failed because {counts[failed_type]['failed']} "
                       f"{failed_type} replica(s) failed.", now)  # fmt: skip
        elif succeeded:
            _set_cond(status, "Running", "False", "PyTorchJobSucceeded",
                      f"PyTorchJob {short} is successfully completed.", now)  # fmt: skip
            _set_cond(status, "Succeeded", "True", "PyTorchJobSucceeded",
                      f"PyTorchJob {short} is successfully completed.", now)  # fmt: skip
            status["completionTime"] = now
        elif running:
            _set_cond(status, "Running", "True", "PyTorchJobRunning",
                      f"PyTorchJob {short} is running.", now)  # fmt: skip
        if _finished(status) and run.get("cleanPodPolicy") in ("Running", "All"):
            self._delete([p for p in self.pods.get(key, {}).values()
                          if (p.get("status") or {}).get("phase") not in TERMINAL])  # fmt: skip
        self._write(job, status)

    def _fail(self, status: dict, reason: str, message: str, now: str) -> None:
        _set_cond(status, "Running", "False", reason, message, now)
        _set_cond(status, "Failed", "True", reason, message, now)
        status["completionTime"] = now

    def _create(self, job: dict, rtype: str, rs: dict, index: int, world: int, replicas) -> None:
        meta = job["metadata"]
        pod_name = f"{meta['name']}-{rtype.lower()}-{index}"
        template = deep_copy(rs.get("template") or {})
        tmeta = template.get("metadata") or {}
        labels = {
            **(tmeta.get("labels") or {}),
            LABEL_JOB: meta["name"],
            LABEL_TYPE: rtype.lower(),
            LABEL_INDEX: str(index),
            LABEL_OPERATOR: "pytorchjob-controller",
        }
        if rtype == "Master":
            labels[LABEL_ROLE] = "master"
        spec = template.get("spec") or {}
        port = _master_port(replicas)
        rank = index if rtype == "Master" else index + (1 if "Master" in replicas else 0)
        env = [
            {"name": "MASTER_PORT", "value": str(port)},
            {"name": "MASTER_ADDR", "value": f"{meta['name']}-master-0"},
            {"name": "WORLD_SIZE", "value": str(world)},
            {"name": "RANK", "value": str(rank)},
            {"name": "PYTHONUNBUFFERED", "value": "1"},
        ]
        for container in spec.get("containers") or []:
            if container.get("name") == CONTAINER:
                own = {e.get("name") for e in container.get("env") or []}
                container["env"] = list(container.get("env") or []) + [
                    e for e in env if e["name"] not in own
                ]
        # The pod restarts its containers itself for OnFailure and Always; for ExitCode the
        # operator decides from the exit code, on a pod that is not restarted.
        policy = _policy(replicas, rtype)
        spec["restartPolicy"] = "Never" if policy == "ExitCode" else policy
        owner = {
            "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": meta["name"],
            "uid": meta.get("uid", ""), "controller": True, "blockOwnerDeletion": True,
        }  # fmt: skip
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": pod_name,
                "namespace": meta["namespace"],
                "labels": labels,
                "annotations": dict(tmeta.get("annotations") or {}),
                "ownerReferences": [owner],
            },
            "spec": spec,
            "status": {"phase": "Pending", "qosClass": "BestEffort"},
        }
        service = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": pod_name,
                "namespace": meta["namespace"],
                "labels": {LABEL_JOB: meta["name"], LABEL_TYPE: rtype.lower()},
                "ownerReferences": [owner],
            },
            "spec": {
                "clusterIP": "None",
                "selector": {
                    LABEL_JOB: meta["name"],
                    LABEL_TYPE: rtype.lower(),
                    LABEL_INDEX: str(index),
                },  # fmt: skip
                "ports": [{"name": PORT_NAME, "port": port, "targetPort": port}],
            },
        }
        with contextlib.suppress(AlreadyExists):
            self.store.create(resources.SERVICES, service)
        try:
            created = self.store.create(resources.PODS, pod)
        except AlreadyExists:
            return
        except Exception as exc:  # an exceeded ResourceQuota, a namespace going away
            log.warning("pytorchjob: cannot create pod %s: %s", pod_name, exc)
            return
        self.pods.setdefault((meta["namespace"], meta["name"]), {})[pod_name] = created

    def _delete(self, pods: list[dict]) -> None:
        for pod in pods:
            meta = pod["metadata"]
            with contextlib.suppress(NotFound):
                self.store.delete(resources.PODS, meta["namespace"], meta["name"])
            owner = _owner(pod)
            if owner:
                self.pods.get((meta["namespace"], owner), {}).pop(meta["name"], None)

    def _write(self, job: dict, status: dict) -> None:
        if status == (job.get("status") or {}):
            return
        meta = job["metadata"]
        with self.store.lock:
            try:
                current = self.store.get(
                    resources.PYTORCHJOBS, meta["namespace"], meta["name"], copy=False
                )
            except NotFound:
                return
            if current["metadata"].get("uid") != meta.get("uid"):
                return
            self.store.update(
                resources.PYTORCHJOBS, {**current, "status": status}, subresource="status",
                check_rv=False,
            )  # fmt: skip


def _finished(status: dict) -> bool:
    return any(
        c.get("type") in ("Succeeded", "Failed") and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


def _master_port(replicas: dict) -> int:
    master = (replicas.get("Master") or {}).get("template") or {}
    for container in (master.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == PORT_NAME and port.get("containerPort"):
                return int(port["containerPort"])
    return DEFAULT_PORT


def _policy(replicas: dict, rtype: str) -> str:
    """A replica type's restart policy (the training operator's default is OnFailure)."""
    return (replicas.get(rtype) or {}).get("restartPolicy") or "OnFailure"


def _exit_code(pod: dict) -> int:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (cs.get("state") or {}).get("terminated") or {}
        if terminated.get("exitCode"):
            return int(terminated["exitCode"])
    return 0


def _type_of(pod: dict) -> str:
    value = (pod["metadata"].get("labels") or {}).get(LABEL_TYPE, "worker")
    return value.capitalize()


def _seconds(stamp: str) -> float:
    from kubesim.clock import parse_time

    parsed = parse_time(stamp)
    return parsed.timestamp() if parsed else 0.0
