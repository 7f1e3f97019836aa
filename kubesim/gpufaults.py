"""GPU faults in kubesim: what DCGM reports about a GPU that goes bad, from a seeded source.

A GPU's health shows in its exporter series (kubesim.dcgm) as the real exporter shows it when its
collectors CSV enables the health fields (the default CSV enables only the XID):

- `DCGM_FI_DEV_XID_ERRORS` (gauge): the last XID the driver reported, 0 for none;
- `DCGM_FI_DEV_ECC_DBE_VOL_TOTAL` (counter): double-bit ECC errors since the driver loaded;
- `DCGM_FI_DEV_THERMAL_VIOLATION` / `DCGM_FI_DEV_POWER_VIOLATION` (counters, ns): how long the
  GPU was throttled for heat or power; a throttled GPU's counter grows with the wall clock;
- `DCGM_EXP_XID_ERRORS_COUNT`: how many XIDs of each code (`err_code`, with `err_msg`) the
  driver reported in the last XID_WINDOW seconds (the exporter's default window, five minutes),
  a series per GPU and code, none for a GPU without XIDs in the window. The last-XID gauge does
  not change when the same XID comes again; this count does.

A fault is injected on demand (`inject`, the tests' and the demo's knob) or, for a fleet pool
with `gpuFaults: {meanSeconds, seed}`, at random times drawn from a generator seeded by the seed
and the node's name (the same seed gives the same faults on the same nodes at the same simulated
times). A drawn fault picks one of the node's GPUs and one of the kinds below. `repair` is the
GPU swapped or reset: the XID goes back to 0 and throttling stops (counters never go back).

The pod on a faulted GPU keeps running here: what the workload makes of an XID 79 varies (a
hang, a crash, silently wrong numbers), and the portal's loop does not rely on it.
"""

from __future__ import annotations

import hashlib
import json
import random
import threading
from dataclasses import dataclass, field

GPU_FAULTS_ANNOTATION = "kubesim.dev/gpu-faults"
XID = "DCGM_FI_DEV_XID_ERRORS"
ECC_DBE = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
THERMAL = "DCGM_FI_DEV_THERMAL_VIOLATION"
POWER = "DCGM_FI_DEV_POWER_VIOLATION"
HEALTH_FIELDS = (ECC_DBE, THERMAL, POWER)
# What a drawn fault is: an XID (48 double-bit ECC, 79 fallen off the bus, 94/95 contained and
# uncontained ECC errors), or throttling.
DRAWN_KINDS = ("xid:79", "xid:48", "xid:94", "xid:95", "thermal", "power")
THROTTLE_SHARE = 0.6  # of the wall clock a throttled GPU spends throttled
XID_COUNT = "DCGM_EXP_XID_ERRORS_COUNT"
XID_WINDOW = 300.0  # seconds (dcgm-exporter's --xid-count-window-size default, 300000 ms)
# What NVIDIA's XID catalogue says each code the faults here report is.
XID_MESSAGES = {
    13: "Graphics Engine Exception",
    31: "GPU memory page fault",
    48: "Double Bit ECC Error",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure",
    74: "NVLINK Error",
    79: "GPU has fallen off the bus",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
}


@dataclass
class GpuState:
    """One GPU's health figures, kept per (node, GPU index)."""

    xid: int = 0
    dbe: int = 0
    # Violation counters (ns) up to `since`, and what grows them after it.
    thermal_ns: float = 0.0
    power_ns: float = 0.0
    throttle: str = ""  # "", "thermal" or "power"
    since: float = 0.0
    history: list = field(default_factory=list)
    xids: list = field(default_factory=list)  # (when, code) of each XID reported

    def counters(self, now: float) -> dict:
        thermal, power = self.thermal_ns, self.power_ns
        grow = max(0.0, now - self.since) * THROTTLE_SHARE * 1e9
        if self.throttle == "thermal":
            thermal += grow
        elif self.throttle == "power":
            power += grow
        return {XID: self.xid, ECC_DBE: self.dbe, THERMAL: int(thermal), POWER: int(power)}

    def xid_counts(self, now: float) -> dict[int, int]:
        """XID code -> how many the driver reported in the window up to `now`."""
        counts: dict[int, int] = {}
        for at, xid in self.xids:
            if now - XID_WINDOW < at <= now:
                counts[xid] = counts.get(xid, 0) + 1
        return counts

    def settle(self, now: float) -> None:
        values = self.counters(now)
        self.thermal_ns, self.power_ns, self.since = values[THERMAL], values[POWER], now


class GpuFaultController:
    """Injected and drawn GPU faults of one store's nodes (read by the DCGM exporter)."""

    def __init__(self, store, clock):
        self.store = store
        self.clock = clock
        self.lock = threading.Lock()
        self.gpus: dict[tuple[str, int], GpuState] = {}
        self.plans: dict[str, tuple[dict, random.Random, float]] = {}

    # -- the knob ---------------------------------------------------------------------------

    def inject(self, node: str, gpu: int, kind: str = "xid:79") -> dict:
        """Make a GPU go bad now: kind "xid:<n>", "ecc" (a double-bit error and its XID 48),
        "thermal" or "power" (throttling from now on). Returns the GPU's figures."""
        now = self.clock.timestamp()
        with self.lock:
            state = self.gpus.setdefault((node, int(gpu)), GpuState(since=now))
            state.settle(now)
            if kind.startswith("xid:"):
                state.xid = int(kind.split(":", 1)[1])
                if state.xid == 48:
                    state.dbe += 1
            elif kind == "ecc":
                state.dbe += 1
                state.xid = 48
            elif kind in ("thermal", "power"):
                state.throttle = kind
            else:
                raise ValueError(f"unknown GPU fault kind {kind!r}")
            if kind.startswith("xid:") or kind == "ecc":
                state.xids.append((now, state.xid))
            state.history.append((now, kind))
            return state.counters(now)

    def repair(self, node: str, gpu: int) -> None:
        """The GPU reset or swapped: no XID, no throttling (counters keep their totals)."""
        now = self.clock.timestamp()
        with self.lock:
            state = self.gpus.get((node, int(gpu)))
            if state is not None:
                state.settle(now)
                state.xid, state.throttle = 0, ""

    def figures(self, node: str, gpu: int, now: float) -> dict:
        """The GPU's health fields for the exporter (zeros for a GPU that never faulted)."""
        with self.lock:
            state = self.gpus.get((node, gpu))
            return state.counters(now) if state else {XID: 0, ECC_DBE: 0, THERMAL: 0, POWER: 0}

    def xid_counts(self, node: str, gpu: int, now: float) -> dict[int, int]:
        """The GPU's XIDs in the exporter's window, by code (empty for none)."""
        with self.lock:
            state = self.gpus.get((node, gpu))
            return state.xid_counts(now) if state else {}

    # -- the seeded source ------------------------------------------------------------------

    def on_event(self, etype: str, rt, obj: dict) -> None:
        if rt.group != "" or rt.plural != "nodes":
            return
        meta = obj["metadata"]
        name = meta["name"]
        plan = (meta.get("annotations") or {}).get(GPU_FAULTS_ANNOTATION)
        if etype == "DELETED" or not plan:
            self.plans.pop(name, None)
            return
        if name in self.plans:
            return
        try:
            spec = json.loads(plan)
            mean = float(spec["meanSeconds"])
        except (ValueError, KeyError, TypeError):
            return
        digest = int(hashlib.sha1(name.encode()).hexdigest()[:8], 16)
        rng = random.Random(int(spec.get("seed", 0)) + digest)
        gpus = int((meta.get("labels") or {}).get("nvidia.com/gpu.count") or 1)
        spec = {**spec, "gpus": max(1, gpus), "meanSeconds": mean}
        self.plans[name] = (spec, rng, self.clock.timestamp() + rng.expovariate(1 / mean))

    def tick(self) -> None:
        now = self.clock.timestamp()
        for name, (spec, rng, due) in list(self.plans.items()):
            if due > now:
                continue
            gpu = rng.randrange(spec["gpus"])
            kind = rng.choice(spec.get("kinds") or DRAWN_KINDS)
            self.inject(name, gpu, kind)
            self.plans[name] = (spec, rng, now + rng.expovariate(1 / spec["meanSeconds"]))

    def next_wakeup(self) -> float | None:
        times = [due for _, _, due in self.plans.values()]
        return min(times) if times else None
