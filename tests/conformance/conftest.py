"""Fixtures of the conformance suite, against the real control plane (cluster/).

`real_cluster` and `real_cluster_info` (tests/fixtures_real.py, shared with tests/scenarios)
reach the running real control plane; `kube` is an official ApiClient for it, and `namespace`
a fresh namespace per test.

Tests that use `real_cluster` (or `go_modules`) run under `make conformance`, or when
tests/conformance is named on pytest's command line; the whole suite (`make test`) deselects
them, since they need the control plane built from Go modules and started (`make conformance`
does both).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from kubernetes import client

from cluster import testing

HERE = Path(__file__).resolve().parent
# Fixtures that need what only `make conformance` provides: the built, running control plane,
# or the Go toolchain with the modules' sources downloaded.
CONFORMANCE_FIXTURES = {"real_cluster", "go_modules"}


def _conformance_requested(config) -> bool:
    if os.environ.get("QM_CONFORMANCE") == "1":
        return True
    for arg in config.args:
        path = Path(str(arg).split("::", 1)[0]).resolve()
        if path == HERE or HERE in path.parents:
            return True
    return False


def pytest_collection_modifyitems(config, items):
    if _conformance_requested(config):
        return
    needs_cluster = [i for i in items if CONFORMANCE_FIXTURES & set(getattr(i, "fixturenames", ()))]
    if needs_cluster:
        config.hook.pytest_deselected(items=needs_cluster)
        items[:] = [i for i in items if i not in needs_cluster]


@pytest.fixture(scope="session")
def go_modules() -> list[Path]:
    """The directories of our Go modules (cluster/build/*), with Go on the PATH."""
    from cluster import build

    if shutil.which("go") is None:
        pytest.fail("the conformance suite needs the Go toolchain (go) on the PATH", pytrace=False)
    return [build.MODULES_DIR / module.directory for module in build.MODULES]


@pytest.fixture(scope="session")
def kube(real_cluster):
    api = testing.api_client(real_cluster)
    yield api
    api.close()


@pytest.fixture
def namespace(kube):
    """A namespace of the test's own (deleted after it, without waiting)."""
    name = testing.unique_name("conf")
    core = client.CoreV1Api(kube)
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


@pytest.fixture
def portal(
    real_cluster, real_cluster_info, kube, db, monkeypatch, django_capture_on_commit_callbacks
):
    """The real cluster registered in the portal with the pools of its fleet file, tiers, and a
    department of two teams of the test's own (tests/conformance/portal.py); tasks run
    in-process as soon as what queued them commits. Inventory synced; nothing reconciled yet."""
    from cluster import nodes as kwok_nodes
    from fleet import kube as fleet_kube
    from tests.conformance.portal import PortalWorld
    from tests.queues.builders import run_tasks_eagerly

    run_tasks_eagerly(monkeypatch)
    world = PortalWorld(
        kubeconfig=Path(real_cluster), info=real_cluster_info, api=kube,
        capture=django_capture_on_commit_callbacks,
    )  # fmt: skip
    try:
        with world.committing():
            world.register(kwok_nodes.read_fleet(real_cluster_info["fleet"]))
        world.sync_inventory()
        yield world
    finally:
        world.teardown()
        fleet_kube.clear_client_cache()
