"""Wires kubesim's controllers to a Store: one background thread, woken by store events."""

from __future__ import annotations

import itertools
import logging
import threading
import time
import weakref

from kubesim import resources
from kubesim.clock import Clock
from kubesim.gpufaults import GpuFaultController
from kubesim.jobs import JobController
from kubesim.jobset import JobSetController
from kubesim.kubelet import Kubelet
from kubesim.kueue import KueueEngine
from kubesim.quota import QuotaStatus
from kubesim.scheduler import Scheduler
from kubesim.spot import SpotController
from kubesim.storage import VolumeBinder
from kubesim.training import PyTorchJobController
from kubesim.volcano import VolcanoController

log = logging.getLogger(__name__)

# Kinds the controllers care about, in the order a restored store is replayed.
WATCHED = (
    resources.NAMESPACES,
    resources.PRIORITY_CLASSES,
    resources.TOPOLOGIES,
    resources.RESOURCE_FLAVORS,
    resources.COHORTS,
    resources.CLUSTER_QUEUES,
    resources.LOCAL_QUEUES,
    resources.WORKLOAD_PRIORITY_CLASSES,
    resources.NODES,
    resources.STORAGE_CLASSES,
    resources.PVCS,
    resources.SECRETS,
    resources.RESOURCE_QUOTAS,
    resources.VOLCANO_QUEUES,
    resources.WORKLOADS,
    resources.JOBS,
    resources.PYTORCHJOBS,
    resources.JOBSETS,
    resources.VCJOBS,
    resources.PODGROUPS,
    resources.PODS,
)
_WATCHED_KEYS = {rt.storage_key for rt in WATCHED}
_RUNNING: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

BATCH = 1000  # store events per round: bounded rounds keep every stage of the pipeline moving
STATUS_INTERVAL = 0.2  # seconds of real time between ClusterQueue/LocalQueue status writes
MAX_SLEEP = 0.25


class Controllers:
    """Kueue, Volcano, Job controller, scheduler and kubelet over one store."""

    def __init__(self, store, clock: Clock | None = None):
        self.store = store
        self.clock = clock or Clock()
        self.kueue = KueueEngine(store, self.clock)
        self.jobs = JobController(store, self.clock, self.kueue)
        self.pytorchjobs = PyTorchJobController(store, self.clock)
        self.jobsets = JobSetController(store, self.clock)
        self.volcano = VolcanoController(store, self.clock)
        self.scheduler = Scheduler(store, self.clock)
        self.kubelet = Kubelet(store, self.clock)
        self.spot = SpotController(store, self.clock)
        self.gpufaults = GpuFaultController(store, self.clock)
        self.volumes = VolumeBinder(store, self.clock)
        self.quotas = QuotaStatus(store)
        self.handlers = (
            self.quotas,
            self.kueue,
            self.jobs,
            self.pytorchjobs,
            self.jobsets,
            self.volcano,
            self.volumes,
            self.scheduler,
            self.kubelet,
            self.spot,
            self.gpufaults,
        )
        # Pending store events, one per object: a newer event replaces an older one in place, so
        # a burst of writes to one object costs one dispatch of its latest state.
        self.events: dict[tuple, tuple[str, object, dict]] = {}
        self.events_lock = threading.Lock()
        self.wake = threading.Event()
        self.stopped = threading.Event()
        self.thread: threading.Thread | None = None
        self.last_status = 0.0
        self.subscribed = False
        self.errors = 0

    # ------------------------------------------------------------------ wiring

    def _on_change(self, etype: str, rt, obj: dict) -> None:
        if rt.storage_key in _WATCHED_KEYS:
            meta = obj.get("metadata") or {}
            key = (rt.storage_key, meta.get("namespace", ""), meta.get("name", ""))
            with self.events_lock:
                self.events[key] = (etype, rt, obj)
            self.wake.set()

    def attach(self) -> None:
        """Subscribe to the store and replay its current objects (idempotent on restore)."""
        if self.subscribed:
            return
        with self.store.lock:
            self.store.subscribe(self._on_change)
            self.subscribed = True
            for rt in WATCHED:
                for obj in self.store.list(rt, copy=False):
                    meta = obj["metadata"]
                    key = (rt.storage_key, meta.get("namespace", ""), meta["name"])
                    self.events[key] = ("ADDED", rt, obj)
        _RUNNING[self.store] = self
        self.volcano.ensure_default_queues()
        self.volumes.ensure_default_class()
        self.wake.set()

    def detach(self) -> None:
        if self.subscribed:
            self.store.unsubscribe(self._on_change)
            self.subscribed = False

    # ------------------------------------------------------------------ one round

    def dispatch(self, limit: int | None = None) -> int:
        """Feed queued store events to every controller; returns how many were handled."""
        with self.events_lock:
            keys = list(itertools.islice(self.events, limit)) if limit else list(self.events)
            batch = [self.events.pop(key) for key in keys]
        n = 0
        for etype, rt, obj in batch:
            n += 1
            for handler in self.handlers:
                try:
                    handler.on_event(etype, rt, obj)
                except Exception:
                    self.errors += 1
                    log.exception(
                        "%s: event %s %s %s failed",
                        type(handler).__name__,
                        etype,
                        rt,
                        obj.get("metadata", {}).get("name"),
                    )
        return n

    def run_once(self, *, force_status: bool = False) -> int:
        """One reconcile round over all controllers; returns the number of events handled."""
        with self.kueue.lock:
            n = self.dispatch(BATCH)
            for step in (
                self.kueue.sync_jobs,
                self.kueue.schedule,
                self.jobsets.reconcile,
                self.jobs.reconcile,
                self.pytorchjobs.reconcile,
                self.volcano.reconcile,
                self.volumes.reconcile,
                self.spot.tick,
                self.gpufaults.tick,
                self.scheduler.schedule,
                self.quotas.reconcile,
                self.kubelet.tick,
            ):
                try:
                    step()
                except Exception:
                    self.errors += 1
                    log.exception("controller step %s failed", step.__qualname__)
            now = time.monotonic()
            if force_status or (not self.events and now - self.last_status >= STATUS_INTERVAL):
                self.last_status = now
                try:
                    self.kueue.write_statuses()
                    self.volcano.write_statuses()
                except Exception:
                    self.errors += 1
                    log.exception("queue status update failed")
        return n

    def run_until_idle(self, max_rounds: int = 1000) -> int:
        """Run rounds until no store events are left (tests and benchmarks)."""
        total = 0
        for _ in range(max_rounds):
            n = self.run_once()
            total += n
            if not self.events:
                break
        self.run_once(force_status=True)
        self.dispatch()
        return total

    # ------------------------------------------------------------------ thread

    def start(self) -> Controllers:
        self.attach()
        self.thread = threading.Thread(target=self._loop, name="kubesim-controllers", daemon=True)
        self.thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self.stopped.set()
        self.wake.set()
        if self.thread is not None:
            self.thread.join(timeout)
        self.detach()
        if _RUNNING.get(self.store) is self:
            del _RUNNING[self.store]

    def next_due(self) -> float | None:
        """The simulated time at which something is next due (a pod's end, a Job's deadline, a
        spot reclaim), or None. A discrete-event driver advances the clock to it."""
        due = [
            d
            for d in (
                self.kubelet.next_wakeup(),
                self.jobs.next_deadline(),
                self.spot.next_wakeup(),
                self.gpufaults.next_wakeup(),
            )
            if d
        ]
        return min(due) if due else None

    def _sleep_seconds(self) -> float:
        due = self.next_due()
        if due is None:
            return MAX_SLEEP
        delta = self.clock.real_seconds(due - self.clock.timestamp())
        return min(MAX_SLEEP, max(0.005, delta))

    def _loop(self) -> None:
        while not self.stopped.is_set():
            self.wake.wait(self._sleep_seconds())
            self.wake.clear()
            if self.stopped.is_set():
                break
            try:
                self.run_once()
                # Keep going while our own writes produce events, but yield between rounds.
                rounds = 0
                while self.events and not self.stopped.is_set() and rounds < 100:
                    self.run_once()
                    rounds += 1
            except Exception:
                self.errors += 1
                log.exception("controller loop round failed")


def start(store, clock: Clock | None = None, *, threaded: bool = True) -> Controllers:
    """Start the controllers on a store; returns a handle with .stop()."""
    existing = _RUNNING.get(store)
    if existing is not None:
        return existing
    controllers = Controllers(store, clock)
    if threaded:
        return controllers.start()
    controllers.attach()
    return controllers


def running(store) -> Controllers | None:
    """The controllers attached to a store, if any."""
    return _RUNNING.get(store)


def run_once(store, clock: Clock | None = None) -> Controllers:
    """Synchronously process everything pending on a store (attaching controllers if needed)."""
    controllers = _RUNNING.get(store) or start(store, clock, threaded=False)
    controllers.run_until_idle()
    return controllers
