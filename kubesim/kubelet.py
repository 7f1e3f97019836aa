"""Simulated kubelet: bound pods run for their configured duration, then succeed or fail."""

from __future__ import annotations

import hashlib
import heapq
import logging

from kubesim import events, spot
from kubesim.clock import parse_time
from kubesim.resources import PODS, SECRETS
from kubesim.store import NotFound, deep_copy, now_rfc3339

log = logging.getLogger(__name__)

DURATION_ANNOTATION = "kubesim.dev/duration-seconds"
EXPECTED_RUNTIME_ANNOTATION = "quartermaster.dev/expected-runtime-seconds"
EXIT_CODE_ANNOTATION = "kubesim.dev/exit-code"
# What the program in a simulated container does, when no kubesim annotation says: container
# env vars, so that a job submitted through the portal (which writes no kubesim annotations)
# can run long or fail as a real program would. KUBESIM_DURATION: its run time ("90", "90s",
# "15m", "2h"); KUBESIM_EXIT_CODE: its exit code at the end; KUBESIM_FAIL_ATTEMPTS: only the
# first N attempts of each worker (pods of the same Job and completion index) exit with it, the
# next ones succeed (a flaky job that a retry cures).
DURATION_ENV = "KUBESIM_DURATION"
EXIT_CODE_ENV = "KUBESIM_EXIT_CODE"
FAIL_ATTEMPTS_ENV = "KUBESIM_FAIL_ATTEMPTS"
DEFAULT_DURATION_SECONDS = 300.0
TERMINAL = ("Succeeded", "Failed")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
INDEX_KEY = "batch.kubernetes.io/job-completion-index"


def container_env(pod: dict, name: str) -> str | None:
    """The value a container of the pod sets for env var `name` (the first that sets it)."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        for env in container.get("env") or []:
            if env.get("name") == name and "value" in env:
                return str(env["value"])
    return None


def parse_duration(text: str) -> float:
    """Seconds of "90", "90s", "15m", "2h" or "1d"; ValueError otherwise."""
    text = text.strip().lower()
    unit = _UNITS.get(text[-1:]) if text else None
    value = float(text[:-1] if unit else text)
    if value < 0 or value != value:
        raise ValueError(text)
    return value * (unit or 1)


def pod_duration(pod: dict) -> float:
    """Simulated run time of a pod in seconds: its kubesim.dev/duration-seconds annotation,
    else its containers' KUBESIM_DURATION, else its expected runtime annotation, else 300."""
    annotations = pod["metadata"].get("annotations") or {}
    candidates = (
        (annotations.get(DURATION_ANNOTATION), float),
        (container_env(pod, DURATION_ENV), parse_duration),
        (annotations.get(EXPECTED_RUNTIME_ANNOTATION), float),
    )
    for value, parse in candidates:
        if value is None:
            continue
        try:
            return max(0.0, parse(value))
        except ValueError:
            continue
    return DEFAULT_DURATION_SECONDS


def pod_exit_code(pod: dict, *, earlier_failures: int = 0) -> int:
    """The exit code the pod's program ends with: its kubesim.dev/exit-code annotation, else
    its containers' KUBESIM_EXIT_CODE (0 when neither says). With KUBESIM_FAIL_ATTEMPTS=N, a
    worker that already failed N times (`earlier_failures`) exits 0."""
    annotated = (pod["metadata"].get("annotations") or {}).get(EXIT_CODE_ANNOTATION)
    if annotated is not None:
        try:
            return int(annotated)
        except ValueError:
            return 1
    try:
        code = int(container_env(pod, EXIT_CODE_ENV) or 0)
    except ValueError:
        return 1
    attempts = container_env(pod, FAIL_ATTEMPTS_ENV)
    if code and attempts is not None:
        try:
            if earlier_failures >= int(attempts):
                return 0
        except ValueError:
            pass
    return code % 256


def pod_ip(namespace: str, name: str) -> str:
    digest = hashlib.sha1(f"{namespace}/{name}".encode()).digest()
    return f"10.{64 + digest[0] % 64}.{digest[1]}.{1 + digest[2] % 254}"


class Kubelet:
    """Starts bound pods and ends them when their simulated duration has elapsed."""

    def __init__(self, store, clock):
        self.store = store
        self.clock = clock
        self.to_start: dict[tuple[str, str], dict] = {}
        self.running: dict[tuple[str, str], str] = {}  # key -> uid
        self.heap: list[tuple[float, tuple[str, str], str]] = []
        # Bound pods whose containers cannot be configured yet (a Secret or key is missing).
        self.config_wait: dict[tuple[str, str], dict] = {}

    def on_event(self, etype: str, rt, obj: dict) -> None:
        if rt.group == "" and rt.plural == "secrets" and etype != "DELETED":
            # Pods waiting for this Secret (CreateContainerConfigError) are tried again.
            namespace = obj["metadata"].get("namespace")
            for key in [k for k in self.config_wait if k[0] == namespace]:
                self.to_start[key] = self.config_wait.pop(key)
            return
        if rt.group != "" or rt.plural != "pods":
            return
        meta = obj["metadata"]
        key = (meta["namespace"], meta["name"])
        phase = (obj.get("status") or {}).get("phase")
        if etype == "DELETED" or phase in TERMINAL or meta.get("deletionTimestamp"):
            self.to_start.pop(key, None)
            self.config_wait.pop(key, None)
            self.running.pop(key, None)
            return
        if not (obj.get("spec") or {}).get("nodeName"):
            return
        if phase == "Running":
            if self.running.get(key) != meta.get("uid"):
                # Restored from a state file: schedule its end from its start time.
                self.running[key] = meta.get("uid", "")
                start = parse_time((obj.get("status") or {}).get("startTime"))
                begin = start.timestamp() if start else self.clock.timestamp()
                heapq.heappush(self.heap, (begin + pod_duration(obj), key, meta.get("uid", "")))
            return
        self.to_start[key] = obj

    def next_wakeup(self) -> float | None:
        """Simulated timestamp of the next pod completion."""
        return self.heap[0][0] if self.heap else None

    def tick(self) -> int:
        """Start bound pods and finish due ones; returns the number of changes."""
        changes = 0
        now = self.clock.timestamp()
        starting, self.to_start = self.to_start, {}
        for key, pod in starting.items():
            try:
                if self._start(key, pod, now):
                    changes += 1
            except Exception:
                log.exception("kubelet: starting %s/%s failed", *key)
        while self.heap and self.heap[0][0] <= now:
            _, key, uid = heapq.heappop(self.heap)
            if self.running.get(key) != uid:
                continue
            try:
                self._finish(key, uid, now)
                changes += 1
            except Exception:
                log.exception("kubelet: finishing %s/%s failed", *key)
        return changes

    def _start(self, key, pod: dict, now: float) -> bool:
        stamp = now_rfc3339(now)
        with self.store.lock:
            try:
                current = self.store.get(PODS, key[0], key[1], copy=False)
            except NotFound:
                return False
            meta = current["metadata"]
            if meta.get("uid") != pod["metadata"].get("uid") or meta.get("deletionTimestamp"):
                return False
            status = deep_copy(current.get("status") or {})
            current = {**current, "status": status}
            if status.get("phase") in ("Running", *TERMINAL):
                return False
            if problem := self._config_problem(current):
                return self._config_error(key, current, status, problem, now)
            status["phase"] = "Running"
            status["startTime"] = stamp
            status["hostIP"] = "192.168.0.1"
            status["podIP"] = pod_ip(*key)
            status["podIPs"] = [{"ip": status["podIP"]}]
            status["containerStatuses"] = [
                {
                    "name": c.get("name", "main"),
                    "image": c.get("image", ""),
                    "imageID": "",
                    "containerID": f"kubesim://{meta.get('uid', '')[:12]}-{c.get('name', '')}",
                    "ready": True,
                    "started": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": stamp}},
                }
                for c in (current.get("spec") or {}).get("containers") or [{}]
            ]
            conds = [c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"]
            for ctype in ("Initialized", "ContainersReady", "Ready"):
                conds.append(
                    {"type": ctype, "status": "True", "lastProbeTime": None,
                     "lastTransitionTime": stamp}
                )  # fmt: skip
            status["conditions"] = conds
            self.store.update(PODS, current, subresource="status", check_rv=False)
        self._pull_secret_warning(current, now)
        for container in (current.get("spec") or {}).get("containers") or []:
            name, image = container.get("name", "main"), container.get("image", "")
            for reason, message in (
                ("Pulled", f'Container image "{image}" already present on machine'),
                ("Created", f"Created container {name}"),
                ("Started", f"Started container {name}"),
            ):
                events.record(self.store, obj=current, reason=reason, message=message,
                              component="kubelet", now=now)  # fmt: skip
        uid = pod["metadata"].get("uid", "")
        self.running[key] = uid
        # A pod that resumes from a checkpoint runs only for the work left (kubesim.spot).
        remaining = max(1.0, pod_duration(pod) - spot.work_done(self.store, pod))
        heapq.heappush(self.heap, (now + remaining, key, uid))
        return True

    def _secret(self, namespace: str, name: str) -> dict | None:
        try:
            return self.store.get(SECRETS, namespace, name, copy=False)
        except NotFound:
            return None

    def _config_problem(self, pod: dict) -> str:
        """What the kubelet says when a container's environment names a missing Secret or key."""
        namespace = pod["metadata"]["namespace"]
        for container in (pod.get("spec") or {}).get("containers") or []:
            refs = [
                (e["valueFrom"]["secretKeyRef"], True)
                for e in container.get("env") or []
                if (e.get("valueFrom") or {}).get("secretKeyRef")
            ] + [
                (e["secretRef"], False)
                for e in container.get("envFrom") or []
                if e.get("secretRef")
            ]
            for ref, keyed in refs:
                if ref.get("optional"):
                    continue
                secret = self._secret(namespace, ref.get("name", ""))
                if secret is None:
                    return f'secret "{ref.get("name", "")}" not found'
                if keyed and ref.get("key") not in (secret.get("data") or {}):
                    return f"couldn't find key {ref.get('key')} in Secret {namespace}/{ref['name']}"
        return ""

    def _config_error(self, key, current: dict, status: dict, problem: str, now: float) -> bool:
        waiting = {"reason": "CreateContainerConfigError", "message": problem}
        statuses = [
            {"name": c.get("name", "main"), "image": c.get("image", ""), "imageID": "",
             "ready": False, "started": False, "restartCount": 0, "state": {"waiting": waiting}}
            for c in (current.get("spec") or {}).get("containers") or [{}]
        ]  # fmt: skip
        self.config_wait[key] = current
        if status.get("containerStatuses") == statuses:
            return False
        status["phase"] = "Pending"
        status["containerStatuses"] = statuses
        self.store.update(PODS, current, subresource="status", check_rv=False)
        events.record(self.store, obj=current, reason="Failed", message=f"Error: {problem}",
                      component="kubelet", now=now, type_="Warning")  # fmt: skip
        return True

    def _pull_secret_warning(self, pod: dict, now: float) -> None:
        namespace = pod["metadata"]["namespace"]
        missing = [
            ref.get("name", "")
            for ref in (pod.get("spec") or {}).get("imagePullSecrets") or []
            if self._secret(namespace, ref.get("name", "")) is None
        ]
        if missing:
            events.record(self.store, obj=pod, reason="FailedToRetrieveImagePullSecret",
                          message=f"Unable to retrieve some image pull secrets "
                          f"({', '.join(missing)}); attempting to pull the image may not "
                          "succeed.", component="kubelet", now=now,
                          type_="Warning")  # fmt: skip

    @staticmethod
    def _restart(status: dict, code: int, stamp: str) -> None:
        """A container that ended under restartPolicy OnFailure (with an error) or Always runs
        again at once; its restartCount and lastState say how it ended (kubesim leaves out the
        kubelet's CrashLoopBackOff delay)."""
        for cs in status.get("containerStatuses") or []:
            cs["restartCount"] = int(cs.get("restartCount") or 0) + 1
            cs["lastState"] = _terminated(cs, code, stamp)
            cs["state"] = {"running": {"startedAt": stamp}}

    def _earlier_failures(self, pod: dict) -> int:
        """Pods of the same Job and completion index as this one that failed before it (only
        counted when KUBESIM_FAIL_ATTEMPTS asks)."""
        if container_env(pod, FAIL_ATTEMPTS_ENV) is None:
            return 0
        meta = pod["metadata"]
        owner = (meta.get("labels") or {}).get("job-name")
        if not owner:
            return 0
        index = (meta.get("annotations") or {}).get(INDEX_KEY)
        return sum(
            1
            for other in self.store.list(PODS, meta["namespace"], f"job-name={owner}", copy=False)
            if other["metadata"]["name"] != meta["name"]
            and (other.get("status") or {}).get("phase") == "Failed"
            and (other["metadata"].get("annotations") or {}).get(INDEX_KEY) == index
            and not _disrupted(other)
        )

    def _finish(self, key, uid: str, now: float) -> None:
        stamp = now_rfc3339(now)
        with self.store.lock:
            try:
                current = self.store.get(PODS, key[0], key[1], copy=False)
            except NotFound:
                self.running.pop(key, None)
                return
            if current["metadata"].get("uid") != uid:
                return
            code = pod_exit_code(current, earlier_failures=self._earlier_failures(current))
            status = deep_copy(current.get("status") or {})
            current = {**current, "status": status}
            policy = (current.get("spec") or {}).get("restartPolicy")
            if policy == "Always" or (policy == "OnFailure" and code != 0):
                # The container is restarted in place: the pod keeps running.
                self._restart(status, code, stamp)
                self.store.update(PODS, current, subresource="status", check_rv=False)
                heapq.heappush(self.heap, (now + pod_duration(current), key, uid))
                return
            status["phase"] = "Succeeded" if code == 0 else "Failed"
            for cs in status.get("containerStatuses") or []:
                cs["ready"] = False
                cs["started"] = False
                cs["state"] = _terminated(cs, code, stamp)
            for cond in status.get("conditions") or []:
                if cond.get("type") in ("Ready", "ContainersReady"):
                    cond["status"] = "False"
                    cond["reason"] = "PodCompleted"
                    cond["lastTransitionTime"] = stamp
            self.store.update(PODS, current, subresource="status", check_rv=False)
        self.running.pop(key, None)


def _terminated(cs: dict, code: int, stamp: str) -> dict:
    """A container status's `terminated` state, for a container that ran until `stamp`."""
    started = ((cs.get("state") or {}).get("running") or {}).get("startedAt", stamp)
    return {
        "terminated": {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "startedAt": started,
            "finishedAt": stamp,
            "containerID": cs.get("containerID", ""),
        }
    }


def _disrupted(pod: dict) -> bool:
    """Stopped by its node's shutdown (kubesim.spot), not by its program."""
    return any(
        c.get("type") == "DisruptionTarget" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )
