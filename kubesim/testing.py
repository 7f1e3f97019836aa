"""Start kubesim inside a test (or a benchmark) and point the official client at it."""

from __future__ import annotations

import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubesim.server import Cluster
from kubesim.store import Store


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
    store: Store
    port: int
    cluster: Cluster

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
    try:
        with tempfile.TemporaryDirectory(prefix="kubesim-") as tmp:
            kubeconfig = str(Path(tmp) / "kubeconfig")
            cluster.start()
            cluster.write_kubeconfig(kubeconfig)
            yield RunningKubesim(
                url=cluster.url,
                kubeconfig=kubeconfig,
                store=cluster.store,
                port=cluster.port,
                cluster=cluster,
            )
    finally:
        cluster.stop()
