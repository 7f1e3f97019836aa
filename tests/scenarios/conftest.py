"""The scenario suite runs every scenario against both clusters: `cluster` is parametrised over
kubesim and the real control plane (cluster/), both on the same fleet (cluster/fleet.yaml) with
Kueue configured alike (fair sharing with both preemption strategies; admission fair sharing
with the portal's half-life, GPUs only). `sc` is one scenario's objects on it, removed after
the scenario.

Which half runs where:
- without QM_CONFORMANCE (`make test`, or pytest naming tests/scenarios) the kubesim half runs:
  kubesim starts in-process once per session, in well under a second;
- with QM_CONFORMANCE=1 (`make conformance`) the real half runs, on the control plane that
  `scripts/real-cluster up` started (the shared `real_cluster` fixture, tests/fixtures_real.py).
The half that does not run is deselected, so each target counts only what it ran.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.fixtures_cluster import CRDS_DIR
from tests.scenarios.harness import KUBESIM, REAL, Cluster, Scenario

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
FLEET = REPO / "cluster" / "fleet.yaml"

# Kueue's configuration on the real control plane (cluster/components.py), given to kubesim.
FAIR_SHARING = "true"
ADMISSION_FAIR_SHARING = json.dumps(
    {
        "usageHalfLifeTime": f"{os.environ.get('FAIR_SHARE_HALF_LIFE_HOURS', '168')}h",
        "usageSamplingInterval": "5m",
        "resourceWeights": {"cpu": 0, "memory": 0},
    }
)


def _half(item) -> str | None:
    callspec = getattr(item, "callspec", None)
    return callspec.params.get("cluster") if callspec else None


def pytest_collection_modifyitems(config, items):
    mine = [i for i in items if HERE in Path(str(i.path)).resolve().parents]
    if not mine:
        return
    other = KUBESIM if os.environ.get("QM_CONFORMANCE") == "1" else REAL

    # A scenario marked kubesim_only has no real half at all: nothing to hold kubesim to there.
    def unwanted(item) -> bool:
        half = _half(item)
        return half == other or (half == REAL and item.get_closest_marker("kubesim_only"))

    drop = {id(i) for i in mine if unwanted(i)}
    if drop:
        config.hook.pytest_deselected(items=[i for i in items if id(i) in drop])
        items[:] = [i for i in items if id(i) not in drop]


@pytest.fixture(scope="session")
def _kubesim_cluster():
    from kubernetes import config

    from kubesim.testing import running_kubesim

    keys = ("KUBESIM_FAIR_SHARING", "KUBESIM_ADMISSION_FAIR_SHARING")
    saved = {k: os.environ.get(k) for k in keys}
    os.environ["KUBESIM_FAIR_SHARING"] = FAIR_SHARING
    os.environ["KUBESIM_ADMISSION_FAIR_SHARING"] = ADMISSION_FAIR_SHARING
    try:
        with running_kubesim(fleet=FLEET, crds_dir=CRDS_DIR) as sim:
            api = config.new_client_from_config(sim.kubeconfig)
            yield Cluster(KUBESIM, api, Path(sim.kubeconfig), sim=sim, timeout=30.0)
            api.close()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture(scope="session")
def _real_cluster(real_cluster, real_cluster_info):
    from cluster import testing

    fleet = real_cluster_info.get("fleet")
    if fleet and Path(fleet).resolve() != FLEET:
        pytest.fail(f"the real cluster runs the fleet {fleet}, the scenarios need {FLEET}")
    api = testing.api_client(real_cluster)
    yield Cluster(REAL, api, Path(real_cluster), timeout=90.0)
    api.close()


@pytest.fixture(scope="session", params=[KUBESIM, REAL])
def cluster(request) -> Cluster:
    """kubesim, or the real control plane."""
    name = "_kubesim_cluster" if request.param == KUBESIM else "_real_cluster"
    return request.getfixturevalue(name)


@pytest.fixture
def sc(cluster):
    """One scenario's objects on the cluster, removed after it."""
    scenario = Scenario(cluster)
    yield scenario
    scenario.cleanup()
