"""Start kubesim inside a test (or a benchmark) and point the official client at it.

`running_kubesim()` starts one and stops it on exit. `KubesimPool` keeps them for a whole test
session: a test checks one out reset to how it started, so a suite pays for a reset per test
instead of a start. `settle()` and `step()` drive the simulated clock: a test that waits for a
pod to end jumps to the moment it ends instead of sleeping until then.
"""

from __future__ import annotations

import json
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubesim.server import Cluster
from kubesim.store import Store

# The kubesims this process runs and somebody uses (started, or checked out of a pool).
_ACTIVE: list[RunningKubesim] = []
_ACTIVE_LOCK = threading.Lock()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class RunningKubesim:
    """What running_kubesim yields."""

    url: str
    kubeconfig: str
    port: int
    cluster: Cluster

    @property
    def store(self) -> Store:
        return self.cluster.store

    @property
    def controllers(self) -> Any:
        return self.cluster.controllers

    @property
    def clock(self) -> Any:
        return self.cluster.clock

    def interrupt(self, node: str, *, notice: float = 30.0, down: float = 60.0) -> bool:
        """Reclaim a spot node now: notice, then its pods stop, then it comes back."""
        from kubesim.controllers import running

        controllers = running(self.store)
        return bool(controllers and controllers.spot.interrupt(node, notice=notice, down=down))

    def gpu_fault(self, node: str, gpu: int, kind: str = "xid:79") -> dict:
        """Make one GPU of a node go bad now, as its DCGM exporter will report it (see
        kubesim.gpufaults); returns its health figures."""
        from kubesim.controllers import running

        return running(self.store).gpufaults.inject(node, gpu, kind)

    def gpu_repair(self, node: str, gpu: int) -> None:
        """The GPU reset or swapped: its XID and throttling are gone."""
        from kubesim.controllers import running

        running(self.store).gpufaults.repair(node, gpu)

    def inject_faults(self, count: int, **kwargs: Any) -> None:
        """Answer the next `count` writes with a 500 Status (see ApiServer.inject_faults)."""
        self.cluster.server.inject_faults(count, **kwargs)

    def freeze(self, methods: tuple[str, ...] | None = None) -> None:
        """Hold requests unanswered until thaw() (see ApiServer.freeze)."""
        server = self.cluster.server
        server.freeze(methods) if methods else server.freeze()

    def thaw(self) -> None:
        self.cluster.server.thaw()

    @property
    def held(self) -> int:
        """How many requests the frozen server is holding now."""
        return self.cluster.server.held

    @contextmanager
    def faster(self, time_scale: float) -> Iterator[None]:
        """Run the clock `time_scale` times faster inside the block: for a test that watches
        something unfold in real time (a followed log) without waiting as long."""
        before = self.clock.time_scale
        self.clock.rescale(time_scale)
        if self.controllers is not None:
            self.controllers.wake.set()
        try:
            yield
        finally:
            self.clock.rescale(before)

    def settle(self) -> None:
        """Let the controllers do, in this thread, everything there is to do now: what the
        requests so far set off, without simulated time passing."""
        if self.controllers is not None:
            self.controllers.run_until_idle()

    def step(self, *, until: float | None = None) -> float | None:
        """Settle, jump the clock to the next moment something is due (a pod's end, a Job's
        deadline, a spot reclaim) and settle again; the seconds jumped, None if nothing is due
        (by `until`, a simulated timestamp, when given)."""
        controllers = self.controllers
        if controllers is None:
            return None
        controllers.run_until_idle()
        due = controllers.next_due()
        if due is None or (until is not None and due > until):
            return None
        jump = max(0.0, due - self.clock.timestamp())
        self.clock.advance(jump)
        controllers.run_until_idle()
        return jump


def active() -> list[RunningKubesim]:
    """The kubesims in use in this process (started, or checked out of a pool)."""
    with _ACTIVE_LOCK:
        return list(_ACTIVE)


def settle_all() -> None:
    """settle() every kubesim in use."""
    for sim in active():
        sim.settle()


def wait_stepping(
    predicate: Callable[[], Any], *, timeout: float = 15.0, interval: float = 0.05
) -> Any:
    """The predicate's first truthy value, None after `timeout` real seconds.

    For a test that waits on kubesim's controllers and their simulated time: the controllers
    settle before each look, and when the predicate still fails the clocks jump to the next
    moment something is due, so a wait for a pod that runs a minute takes a few milliseconds.
    The clocks never jump past what `timeout` real seconds would have brought (timeout times
    the clock's time_scale), so what the wait can see is what a sleeping wait could: a pod that
    ends later than that does not end during the wait. A predicate that waits on something else
    (another process, a thread of the test) is polled every `interval` seconds meanwhile.
    """
    deadline = time.monotonic() + timeout
    horizons: dict[int, float] = {}
    while True:
        settle_all()
        if value := predicate():
            return value
        if time.monotonic() >= deadline:
            return None
        moved = False
        for sim in active():
            until = horizons.setdefault(
                id(sim), sim.clock.timestamp() + timeout * sim.clock.time_scale
            )
            moved = bool(sim.step(until=until)) or moved
        if not moved:  # nothing due in time (or due already): poll, as a sleeping wait does
            time.sleep(interval)


def _activate(sim: RunningKubesim) -> None:
    with _ACTIVE_LOCK:
        _ACTIVE.append(sim)


def _deactivate(sim: RunningKubesim) -> None:
    with _ACTIVE_LOCK:
        if sim in _ACTIVE:
            _ACTIVE.remove(sim)


@contextmanager
def _serving(cluster: Cluster) -> Iterator[RunningKubesim]:
    try:
        with tempfile.TemporaryDirectory(prefix="kubesim-") as tmp:
            kubeconfig = str(Path(tmp) / "kubeconfig")
            cluster.start()
            cluster.write_kubeconfig(kubeconfig)
            yield RunningKubesim(
                url=cluster.url,
                kubeconfig=kubeconfig,
                port=cluster.port,
                cluster=cluster,
            )
    finally:
        cluster.stop()


@contextmanager
def running_kubesim(
    *,
    fleet: dict | str | Path | None = None,
    crds_dir: str | Path | None = None,
    controllers: bool = True,
    time_scale: float = 1.0,
    state: str | Path | None = None,
    watch_history: int = 20000,
) -> Iterator[RunningKubesim]:
    """Run kubesim on a free port in background threads; stop everything on exit.

    fleet is a fleet dict or file; state a JSON file to load and save; watch_history the number
    of events kept for watches that resume from a resourceVersion.
    """
    cluster = Cluster(
        fleet=fleet,
        crds_dir=crds_dir,
        state=state,
        controllers=controllers,
        time_scale=time_scale,
        watch_history=watch_history,
    )
    with _serving(cluster) as sim:
        _activate(sim)
        try:
            yield sim
        finally:
            _deactivate(sim)


class KubesimPool:
    """Running kubesims shared by the tests of a session.

    `checkout()` hands out a kubesim of the asked fleet and settings that no one else holds,
    reset to how it started (Cluster.reset: the fleet's nodes only, fresh controllers and clock,
    no watch open); one is started the first time the settings are asked for, or when every
    one of them is in use (a test with two clusters). Between checkouts its controllers rest.
    """

    def __init__(self, *, crds_dir: str | Path | None = None):
        self.crds_dir = crds_dir
        self._free: dict[str, list[RunningKubesim]] = {}
        self._lock = threading.Lock()
        self._stack = ExitStack()
        self.started = 0
        self.checkouts = 0

    @contextmanager
    def checkout(
        self,
        *,
        fleet: dict | str | Path | None = None,
        controllers: bool = True,
        time_scale: float = 1.0,
        watch_history: int = 20000,
    ) -> Iterator[RunningKubesim]:
        settings = [fleet, controllers, time_scale, watch_history]
        key = json.dumps(settings, sort_keys=True, default=str)
        with self._lock:
            free = self._free.setdefault(key, [])
            sim = free.pop() if free else None
            self.checkouts += 1
        if sim is None:
            cluster = Cluster(
                fleet=fleet,
                crds_dir=self.crds_dir,
                controllers=controllers,
                time_scale=time_scale,
                watch_history=watch_history,
            )
            sim = self._stack.enter_context(_serving(cluster))
            with self._lock:
                self.started += 1
        else:
            sim.cluster.reset()
        _activate(sim)
        try:
            yield sim
        finally:
            _deactivate(sim)
            sim.cluster.pause()
            # One whose server a test stopped (to see the cluster unreachable) is not reused.
            if not sim.cluster.server.stopping.is_set():
                with self._lock:
                    self._free[key].append(sim)

    def close(self) -> None:
        """Stop every kubesim the pool started."""
        self._stack.close()
        with self._lock:
            self._free.clear()

    def __enter__(self) -> KubesimPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
