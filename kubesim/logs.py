"""Pod logs as a training container writes them: start-up lines, a training step every few
seconds with loss and throughput, and the exit. Deterministic per pod (its namespace and name)
and a function of time, so a tail of any length is computed without keeping anything, and a
followed log gains a line every STEP_SECONDS of (simulated) time."""

from __future__ import annotations

import hashlib
import math
from datetime import UTC, datetime

from kubesim.store import BadRequest

STEP_SECONDS = 1.0
# A container with KUBESIM_CHECKPOINT_EVERY=<n> saves a checkpoint every n steps, and says so in
# its log as the portal's convention asks (a "QM_CHECKPOINT step=<n> path=<p>" marker).
CHECKPOINT_EVERY_ENV = "KUBESIM_CHECKPOINT_EVERY"
HEADER = 3  # lines before the first step


def _seed(pod: dict) -> float:
    meta = pod["metadata"]
    digest = hashlib.sha1(f"{meta.get('namespace')}/{meta['name']}".encode()).digest()
    return int.from_bytes(digest[:4], "big") / 2**32


def _time(value: str | None) -> float | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _stamp(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f000Z")


def _env(pod: dict, name: str) -> str:
    for c in (pod.get("spec") or {}).get("containers") or []:
        for e in c.get("env") or []:
            if e.get("name") == name and isinstance(e.get("value"), str):
                return e["value"]
    return ""


def _env_int(pod: dict, name: str) -> int:
    value = _env(pod, name)
    return int(value) if value.isdigit() else 0


def _terminated(pod: dict) -> dict | None:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if (status.get("state") or {}).get("terminated"):
            return status["state"]["terminated"]
    return None


def check_readable(pod: dict, *, container: str | None, previous: bool) -> str:
    """The container whose log is asked for; BadRequest as the API server words it."""
    names = [c["name"] for c in (pod.get("spec") or {}).get("containers") or []]
    name = container or (names[0] if len(names) == 1 else "")
    pod_name = pod["metadata"]["name"]
    if not name:
        raise BadRequest(
            f"a container name must be specified for pod {pod_name}, choose one of: {names}"
        )
    if name not in names:
        raise BadRequest(f"container {name} is not valid for pod {pod_name}")
    if previous:
        raise BadRequest(f'previous terminated container "{name}" in pod "{pod_name}" not found')
    if _time((pod.get("status") or {}).get("startTime")) is None or (
        (pod.get("status") or {}).get("phase") == "Pending"
    ):
        raise BadRequest(
            f'container "{name}" in pod "{pod_name}" is waiting to start: ContainerCreating'
        )
    return name


def _line(pod: dict, seed: float, index: int, steps: int, ended: dict | None) -> str:
    """Line `index` of the log (0-based) of a pod that has run `steps` steps."""
    meta = pod["metadata"]
    node = (pod.get("spec") or {}).get("nodeName", "")
    gpus = 0
    for c in (pod.get("spec") or {}).get("containers") or []:
        gpus += int(((c.get("resources") or {}).get("limits") or {}).get("nvidia.com/gpu", 0) or 0)
    if index == 0:
        rank = (meta.get("annotations") or {}).get("batch.kubernetes.io/job-completion-index", "0")
        return f"[rank {rank}] starting on {node} with {gpus} GPU(s)"
    if index == 1:
        return f"loading dataset shard {int(seed * 64)} (1,281,167 samples)"
    if index == 2:
        return "model built: 25.6M parameters; mixed precision on"
    step = index - HEADER + 1
    if step <= steps:
        loss = 2.5 * math.exp(-step / (400 + 600 * seed)) + 0.1 + 0.02 * math.sin(step * 1.7 + seed)
        rate = 900 + 300 * seed + 25 * math.sin(step * 0.3)
        text = f"step {step} loss={loss:.4f} throughput={rate:.1f} samples/s"
        every = _env_int(pod, CHECKPOINT_EVERY_ENV)
        if every and step % every == 0:
            # The portal's convention for "saved a checkpoint" (queues.services.protection).
            where = _env(pod, "CHECKPOINT_DIR") or "/checkpoints"
            text += f"; QM_CHECKPOINT step={step} path={where}/step-{step}"
        return text
    code = (ended or {}).get("exitCode", 0)
    if code:
        return f"Traceback (most recent call last): RuntimeError at step {steps}; exit code {code}"
    return f"training finished after {steps} steps"


def pod_log(
    pod: dict,
    *,
    now: float,
    tail: int | None = None,
    since_seconds: float | None = None,
    timestamps: bool = False,
    start_index: int = 0,
) -> tuple[list[str], int, bool]:
    """(lines, index of the next line, whether the log is complete) at time `now`."""
    start = _time(pod["status"]["startTime"])
    ended = _terminated(pod)
    end = _time(ended.get("finishedAt")) if ended else None
    until = min(now, end) if end else now
    seed = _seed(pod)
    # Step k is written at start + (HEADER - 1) + k × STEP_SECONDS: a line every STEP_SECONDS.
    steps = max(0, int((until - start - (HEADER - 1)) / STEP_SECONDS)) if until > start else 0
    header = HEADER if ended or steps else min(HEADER, int(max(0.0, until - start)) + 1)
    total = header + steps + (1 if ended else 0)

    def at(i: int) -> float:
        if i < HEADER:
            return start + i
        if i < HEADER + steps:
            return start + (HEADER - 1) + (i - HEADER + 1) * STEP_SECONDS
        return end or until

    first = start_index
    if tail is not None:
        first = max(first, total - max(0, tail))
    if since_seconds is not None:
        lower = now - since_seconds
        while first < total and at(first) < lower:
            first += 1
    lines = []
    for i in range(first, total):
        text = _line(pod, seed, i, steps, ended)
        lines.append(f"{_stamp(at(i))} {text}" if timestamps else text)
    return lines, total, ended is not None
