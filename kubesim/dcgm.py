"""Simulated NVIDIA DCGM exporter: Prometheus text exposition for every GPU of the fleet."""

from __future__ import annotations

import hashlib
import math
import os
import threading
import time
import weakref
from functools import lru_cache
from pathlib import Path

from kubesim import resources
from kubesim.fleet import (
    DRIVER_VERSION,
    GPU_UUIDS_ANNOTATION,
    MIG_PREFIX,
    MIG_PROFILE_ANNOTATION,
    SHARED_GPU,
    accelerator,
    gpu_uuid,
    mig_memory_mib,
    model_info,
)
from kubesim.gpufaults import XID_COUNT, XID_MESSAGES
from kubesim.scheduler import GPU_INDEX_ANNOTATION
from kueuemodel.resources import GPU, to_units

GPU_UTIL_ANNOTATION = "kubesim.dev/gpu-util"
# What the program in the pod would make of its GPUs, when no annotation says: a container env
# var, so that a job submitted through the portal (which writes no kubesim annotations) can
# ask for an idle GPU the way a real job forgets to use one.
GPU_UTIL_ENV = "KUBESIM_GPU_UTIL"
DEFAULT_UTIL = 80.0  # percent: a busy training job
BOOT_SECONDS = 86400.0  # the counter starts as if every GPU had idled for a day since boot

# The dcgm-exporter's default metric set, used when the shared CSV cannot be found.
_FALLBACK = [
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter",
     "Total energy consumption since boot (in mJ)."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active."),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge",
     "Ratio of cycles the tensor (HMMA) pipe is active."),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge",
     "Ratio of cycles the device memory interface is active sending or receiving data."),
    ("DCGM_FI_DRIVER_VERSION", "label", "Driver Version"),
]  # fmt: skip

_PCI_SXM = ["07", "0F", "47", "4E", "87", "90", "B7", "BD"]


def shared_dir() -> Path:
    """The shared data directory (QM_SHARED_DIR, else ../shared next to the repository)."""
    env = os.environ.get("QM_SHARED_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[1] / ".." / "shared"


@lru_cache(maxsize=4)
def counters(path: str | None = None) -> tuple[tuple[str, str, str], ...]:
    """(field, type, help) rows enabled in the dcgm-exporter counters CSV."""
    csv = Path(path) if path else shared_dir() / "dcgm" / "default-counters.csv"
    rows = []
    try:
        text = csv.read_text(encoding="utf-8")
    except OSError:
        return tuple(_FALLBACK)
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = [p.strip() for p in line.split(",", 2)]
        if len(parts) == 3 and parts[1] in ("gauge", "counter", "label"):
            rows.append((parts[0], parts[1], parts[2]))
    return tuple(rows) or tuple(_FALLBACK)


# Health fields the exporter's default CSV leaves commented out: the portal's deployment enables
# them (README, "GPU faults"), and kubesim's exporter serves them as such an exporter would.
HEALTH_FIELDS = (
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "DCGM_FI_DEV_THERMAL_VIOLATION",
    "DCGM_FI_DEV_POWER_VIOLATION",
)


def health_counters(path: str | None = None) -> tuple[tuple[str, str, str], ...]:
    """(field, type, help) of HEALTH_FIELDS, read from the commented rows of the counters CSV."""
    found = {row[0]: row for row in _commented_rows(path) if row[0] in HEALTH_FIELDS}
    return tuple(found.get(f, (f, "counter", f)) for f in HEALTH_FIELDS)


@lru_cache(maxsize=4)
def _commented_rows(path: str | None) -> tuple[tuple[str, str, str], ...]:
    """Every (field, type, help) row of the counters CSV, commented out or not (read once per
    path: the exporter renders on every scrape)."""
    csv = Path(path) if path else shared_dir() / "dcgm" / "default-counters.csv"
    try:
        text = csv.read_text(encoding="utf-8")
    except OSError:
        text = ""
    rows = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.strip().lstrip("#").split(",", 2)]
        if len(parts) == 3:
            rows.append((parts[0], parts[1], parts[2]))
    return tuple(rows)


def xid_count_row(path: str | None = None) -> tuple[str, str, str]:
    """(field, type, help) of the XID count, from its commented row of the counters CSV."""
    rows = {row[0]: row for row in _commented_rows(path)}
    return rows.get(XID_COUNT, (XID_COUNT, "counter", "reported XIDs during last window"))


def _unit(seed: str) -> float:
    """A deterministic pseudo-random number in [0, 1) from a string."""
    return int.from_bytes(hashlib.blake2b(seed.encode(), digest_size=4).digest(), "big") / 2**32


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def pci_bus_id(index: int) -> str:
    bus = _PCI_SXM[index] if index < len(_PCI_SXM) else f"{0x10 + index * 8:02X}"
    return f"00000000:{bus}:00.0"


class _EnergyState:
    """Per-GPU energy integration, so the counter grows monotonically with power over time."""

    def __init__(self):
        self.lock = threading.Lock()
        self.gpus: dict[str, list[float]] = {}  # uuid -> [last timestamp, energy mJ, last W]

    def advance(self, uuid: str, now: float, power: float, idle: float) -> float:
        entry = self.gpus.get(uuid)
        if entry is None:
            energy = (BOOT_SECONDS * (1 + _unit(uuid))) * idle * 1000.0
            self.gpus[uuid] = [now, energy, power]
            return energy
        last, energy, last_power = entry
        if now > last:
            energy += (last_power + power) / 2.0 * (now - last) * 1000.0
            entry[0] = now
        entry[1] = energy
        entry[2] = power
        return energy


_STATES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_STATES_LOCK = threading.Lock()


def _state(store) -> _EnergyState:
    with _STATES_LOCK:
        state = _STATES.get(store)
        if state is None:
            state = _STATES[store] = _EnergyState()
        return state


def _now(store) -> float:
    from kubesim.controllers import running

    controllers = running(store)
    return controllers.clock.timestamp() if controllers is not None else time.time()


def _faults(store):
    """The store's GPU fault controller (kubesim.gpufaults), or None without controllers."""
    from kubesim.controllers import running

    controllers = running(store)
    return controllers.gpufaults if controllers is not None else None


def pod_util_target(pod: dict) -> float:
    """The utilisation a pod's GPUs run at: its annotation, else its containers' env var, else
    a busy training job's."""
    annotations = pod["metadata"].get("annotations") or {}
    value = annotations.get(GPU_UTIL_ANNOTATION)
    if value is None:
        for container in (pod.get("spec") or {}).get("containers") or []:
            for env in container.get("env") or []:
                if env.get("name") == GPU_UTIL_ENV and "value" in env:
                    value = env["value"]
    try:
        return DEFAULT_UTIL if value is None else float(value)
    except (TypeError, ValueError):
        return DEFAULT_UTIL


def utilisation(base: float, uuid: str, now: float) -> float:
    """Utilisation around base: a slow training rhythm plus deterministic jitter."""
    if base <= 0:
        return 0.0  # a job that asked for an idle GPU stays exactly at zero (stuck-at-zero)
    spread = min(1.0, base / 60.0)  # low targets wobble less
    phase = _unit(uuid) * 2 * math.pi
    wave = 6.0 * spread * math.sin(2 * math.pi * now / 300.0 + phase)
    jitter = (_unit(f"{uuid}/{int(now // 15)}") - 0.5) * 8.0 * spread
    return max(0.0, min(100.0, base + wave + jitter))


def _holders(store, node: str | None) -> dict[tuple[str, int], dict]:
    """(node, GPU index) → running pod that holds it."""
    out = {}
    for pod in store.list(resources.PODS, copy=False):
        spec = pod.get("spec") or {}
        node_name = spec.get("nodeName")
        if not node_name or (node is not None and node_name != node):
            continue
        if (pod.get("status") or {}).get("phase") != "Running":
            continue
        indices = (pod["metadata"].get("annotations") or {}).get(GPU_INDEX_ANNOTATION, "")
        for idx in indices.split(","):
            if idx.strip().isdigit():
                out[(node_name, int(idx))] = pod
    return out


def _gpu_container(pod: dict) -> str:
    containers = (pod.get("spec") or {}).get("containers") or []
    for c in containers:
        res = c.get("resources") or {}
        names = [*(res.get("limits") or {}), *(res.get("requests") or {})]
        if any(n in (GPU, SHARED_GPU) or n.startswith(MIG_PREFIX) for n in names):
            return c.get("name", "")
    return containers[0].get("name", "") if containers else ""


def render(store, node: str | None = None, *, csv_path: str | None = None) -> str:
    """The exporter's /metrics text for every GPU in the fleet, or for one node."""
    if node is None:
        nodes = store.list(resources.NODES, copy=False)
    else:
        try:
            nodes = [store.get(resources.NODES, None, node, copy=False)]
        except Exception:
            nodes = []
    holders = _holders(store, node)
    now = _now(store)
    energy_state = _state(store)
    rows = counters(csv_path)
    label_rows = [r for r in rows if r[1] == "label"]
    metric_rows = [r for r in rows if r[1] != "label"]
    metric_rows += [r for r in health_counters(csv_path) if r[0] not in {m[0] for m in rows}]
    faults = _faults(store)
    gpus = []  # (label string, values dict)
    xids = []  # (the GPU's label string, XID code, count in the window)
    with energy_state.lock:
        for node_obj in nodes:
            meta = node_obj["metadata"]
            annotations = meta.get("annotations") or {}
            alloc = (node_obj.get("status") or {}).get("capacity") or {}
            accel, per_gpu = accelerator(node_obj)
            try:
                count = to_units(accel, alloc.get(accel, 0)) // per_gpu
            except ValueError:
                count = 0
            if not count:
                continue
            # A MIG GPU is reported per instance (GPU_I_PROFILE, GPU_I_ID), as dcgm-exporter
            # does; each instance draws its share of the GPU's power.
            profile = annotations.get(MIG_PROFILE_ANNOTATION, "")
            model = annotations.get("kubesim.dev/gpu-model") or (meta.get("labels") or {}).get(
                "nvidia.com/gpu.product", "NVIDIA GPU"
            ).replace("-", " ")
            driver = annotations.get("kubesim.dev/driver-version", DRIVER_VERSION)
            info = model_info(model)
            memory = int((meta.get("labels") or {}).get("nvidia.com/gpu.memory") or info["memory"])
            uuids = [u for u in annotations.get(GPU_UUIDS_ANNOTATION, "").split(",") if u]
            host = meta["name"]
            for index in range(count * per_gpu):
                gpu, instance = divmod(index, per_gpu)
                uuid = uuids[gpu] if gpu < len(uuids) else gpu_uuid(host, gpu)
                pod = holders.get((host, index))
                labels = (
                    f'gpu="{gpu}",UUID="{uuid}",pci_bus_id="{pci_bus_id(gpu)}",'
                    f'device="nvidia{gpu}",modelName="{_escape(model)}",Hostname="{host}"'
                )
                base = labels
                if profile:
                    labels += f',GPU_I_PROFILE="{_escape(profile)}",GPU_I_ID="{instance}"'
                elif per_gpu > 1:
                    # A time-sliced GPU: one series per replica (dcgm-exporter's virtual GPUs),
                    # each with the pod that holds it; the GPU's figures are shared.
                    labels += f',vgpu="{instance}"'
                for field, _, _ in label_rows:
                    value = driver if field == "DCGM_FI_DRIVER_VERSION" else ""
                    labels += f',{field}="{_escape(value)}"'
                if pod is not None:
                    pmeta = pod["metadata"]
                    labels += (
                        f',container="{_escape(_gpu_container(pod))}",'
                        f'namespace="{pmeta["namespace"]}",pod="{pmeta["name"]}"'
                    )
                key = f"{uuid}/{instance}" if per_gpu > 1 else uuid
                share = {"tdp": info["tdp"] / per_gpu, "idle": info["idle"] / per_gpu}
                part = {**info, **share} if per_gpu > 1 else info
                values = _values(pod, key, now, part, mig_memory_mib(profile) or memory)
                values["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] = int(
                    energy_state.advance(key, now, values["DCGM_FI_DEV_POWER_USAGE"], part["idle"])
                )
                if faults is not None:
                    values.update(faults.figures(host, gpu, now))
                    if instance == 0:  # the count is the physical GPU's, once
                        xids.extend((base, code, n) for code, n in
                                    sorted(faults.xid_counts(host, gpu, now).items()))  # fmt: skip
                gpus.append((labels, values))
    out = []
    for field, kind, help_text in metric_rows:
        out.append(f"# HELP {field} {help_text}\n# TYPE {field} {kind}\n")
        out.extend(f"{field}{{{labels}}} {_num(values.get(field, 0))}\n" for labels, values in gpus)
    if xids:
        field, kind, help_text = xid_count_row(csv_path)
        out.append(f"# HELP {field} {help_text}\n# TYPE {field} {kind}\n")
        out.extend(
            f'{field}{{{labels},err_code="{code}",'
            f'err_msg="{_escape(XID_MESSAGES.get(code, "Unknown Error"))}"}} {n}\n'
            for labels, code, n in xids
        )
    return "".join(out)


def _num(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    return repr(round(value, 6))


def _values(pod: dict | None, uuid: str, now: float, info: dict, memory: int) -> dict:
    idle_w, tdp = info["idle"], info["tdp"]
    reserved = max(256, memory // 128)
    if pod is None:
        util = 0.0
        used = 0
        power = idle_w * (0.95 + 0.1 * _unit(f"{uuid}/p/{int(now // 15)}"))
        temp = 30 + 4 * _unit(uuid)
    else:
        base = pod_util_target(pod)
        util = round(utilisation(base, uuid, now))
        used = int((memory - reserved) * (0.35 + 0.55 * util / 100.0)) if util else 512
        power = idle_w + (tdp - idle_w) * (util / 100.0) * (
            0.85 + 0.1 * _unit(f"{uuid}/{now // 15}")
        )
        temp = 33 + 45 * util / 100.0
    ratio = util / 100.0
    return {
        "DCGM_FI_DEV_GPU_UTIL": int(util),
        "DCGM_FI_DEV_MEM_COPY_UTIL": int(util * 0.45),
        "DCGM_FI_DEV_ENC_UTIL": 0,
        "DCGM_FI_DEV_DEC_UTIL": 0,
        "DCGM_FI_DEV_SM_CLOCK": 1410 if util else 210,
        "DCGM_FI_DEV_MEM_CLOCK": 1593,
        "DCGM_FI_DEV_GPU_TEMP": int(temp),
        "DCGM_FI_DEV_MEMORY_TEMP": int(temp + 3),
        "DCGM_FI_DEV_POWER_USAGE": round(power, 3),
        "DCGM_FI_DEV_FB_USED": used,
        "DCGM_FI_DEV_FB_FREE": memory - reserved - used,
        "DCGM_FI_DEV_FB_RESERVED": reserved,
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": round(ratio * 0.97, 6),
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": round(ratio * 0.55, 6),
        "DCGM_FI_PROF_DRAM_ACTIVE": round(ratio * 0.4, 6),
        "DCGM_FI_PROF_PCIE_TX_BYTES": int(ratio * 2.5e8),
        "DCGM_FI_PROF_PCIE_RX_BYTES": int(ratio * 9.0e8),
    }
