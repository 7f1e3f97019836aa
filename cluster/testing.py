"""What tests against the real control plane share: reaching (or starting) the cluster, a
client for it, objects named per test, and waiting for what the controllers do."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from kubernetes import client, config

from cluster import build, control

T = TypeVar("T")


class ClusterUnavailable(RuntimeError):
    """The real control plane is neither running nor startable without a build."""


def ensure_cluster(state: str | None = None, **options) -> tuple[control.Cluster, bool]:
    """The cluster of a state directory, started unless it runs: (cluster, started here).

    Starting takes about half a minute; building the binaries takes many (make cluster), so a
    missing binary is an error here rather than a build inside a test's time limit."""
    cluster = control.Cluster(control.Layout(control.state_dir(state)))
    if cluster.is_up():
        return cluster, False
    missing = build.missing()
    if missing:
        raise ClusterUnavailable(
            f"the real control plane's binaries are not built ({', '.join(missing)}): "
            "run `make cluster` (or `make conformance`, which builds and starts it)"
        )
    cluster.up(control.Options(**options))
    return cluster, True


def api_client(kubeconfig: str | Path) -> client.ApiClient:
    """An official client for the cluster, as the portal would make one from a kubeconfig."""
    return config.new_client_from_config(config_file=str(kubeconfig))


def unique_name(prefix: str) -> str:
    """A DNS-1123 name no other test uses (cluster-scoped objects outlive namespaces)."""
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def wait_for(
    probe: Callable[[], T | None], *, timeout: float = 60.0, interval: float = 0.25, what: str = ""
) -> T:
    """Poll probe until it returns something truthy; fail with what was awaited after timeout."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what or probe!r}: {last!r}")
