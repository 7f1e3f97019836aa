"""The real control plane (cluster/) as a session fixture, shared by tests/conformance and the
real half of tests/scenarios.

`real_cluster` yields the admin kubeconfig's path of a running real control plane: the one
`scripts/real-cluster up` started (var/real-cluster, or REAL_CLUSTER_DIR), else one it starts
itself and stops at the end (the binaries must be built: `make cluster`). `real_cluster_info`
is what `up` recorded (server, versions, ports, fleet, `dcgm_url`).

Only `make conformance` (QM_CONFORMANCE=1) runs the tests that use them: the suites' conftests
deselect them otherwise.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def real_cluster():
    """The admin kubeconfig of the running real control plane (started if it is not)."""
    from cluster import testing

    try:
        cluster, started = testing.ensure_cluster()
    except testing.ClusterUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)
    yield cluster.layout.kubeconfig
    if started:
        cluster.down()


@pytest.fixture(scope="session")
def real_cluster_info(real_cluster):
    from cluster import control

    return control.Cluster(control.Layout(real_cluster.parent)).info()
