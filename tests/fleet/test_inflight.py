"""One waiter at most on a cluster that stopped answering (fleet.kube.inflight): the registry of
requests in flight, in Redis and in a file, and the client's use of it against a frozen
kubesim (threads stand in for worker processes: each registers its own requests)."""

import threading
import time

import pytest

from fleet import kube
from fleet.kube import inflight
from fleet.kube.health import ClusterHealth
from kubesim.testing import running_kubesim
from tests.conftest import wait_until
from tests.fixtures_cluster import CRDS_DIR, SIM_FLEET

CLUSTER_ID = 987_654


@pytest.fixture(params=["redis", "file"])
def registry(request, settings, tmp_path):
    """The registry of either kind, empty."""
    if request.param == "file":
        settings.KUBE_INFLIGHT_URL = ""
        settings.VAR_DIR = tmp_path
    else:
        assert settings.KUBE_INFLIGHT_URL.startswith("redis://")
    inflight.forget(CLUSTER_ID)
    yield request.param
    inflight.forget(CLUSTER_ID)


def test_the_first_request_is_patient_the_next_ones_impatient(registry):
    first = inflight.enter(CLUSTER_ID, patience=0.5)
    second = inflight.enter(CLUSTER_ID, patience=0.5)
    assert isinstance(first, inflight.Entry) and first.patient
    assert isinstance(second, inflight.Entry) and not second.patient
    inflight.leave(first, answered=True)
    inflight.leave(second, answered=True)
    assert inflight.enter(CLUSTER_ID, patience=0.5).patient


def test_a_request_waiting_past_its_patience_with_no_answer_refuses_the_next(registry):
    waiting = inflight.enter(CLUSTER_ID, patience=0.2)
    time.sleep(0.3)
    refused = inflight.enter(CLUSTER_ID, patience=0.2)
    assert isinstance(refused, inflight.Overdue) and refused.waited >= 0.3
    inflight.leave(waiting, answered=False)
    assert isinstance(inflight.enter(CLUSTER_ID, patience=0.2), inflight.Entry)


def test_a_slow_request_is_not_overdue_while_the_cluster_answers_others(registry):
    # Three answers 0.4 s apart: the slow request waits past its patience (1 s) in all, but
    # never past it since the cluster last answered (room for a loaded machine's sleeps).
    slow = inflight.enter(CLUSTER_ID, patience=1.0)
    for _ in range(3):
        time.sleep(0.4)
        quick = inflight.enter(CLUSTER_ID, patience=1.0)
        assert isinstance(quick, inflight.Entry)
        inflight.leave(quick, answered=True)
    assert isinstance(inflight.enter(CLUSTER_ID, patience=1.0), inflight.Entry)
    inflight.leave(slow, answered=True)


def test_entries_of_a_process_that_died_mid_request_are_forgotten(registry, monkeypatch):
    inflight.enter(CLUSTER_ID, patience=0.1)  # never left: its process died
    monkeypatch.setattr(inflight, "STALE_AFTER", 0.2)
    time.sleep(0.3)
    assert inflight.enter(CLUSTER_ID, patience=0.1).patient


def test_the_request_of_a_process_of_this_host_that_died_is_forgotten_at_once(registry):
    import os

    from tests.queues.builders import dead_pid

    killed = f"{os.uname().nodename}:{dead_pid()}:1:1|0.100"
    inflight._backend().enter(CLUSTER_ID, killed, 0.1, time.time() - 5)
    assert inflight.enter(CLUSTER_ID, patience=0.1).patient
    # One of another host cannot be told dead: it is waited out (STALE_AFTER at most).
    inflight.forget(CLUSTER_ID)
    inflight._backend().enter(CLUSTER_ID, "elsewhere:1:1:1|0.100", 0.1, time.time() - 5)
    assert isinstance(inflight.enter(CLUSTER_ID, patience=0.1), inflight.Overdue)


def test_patience_follows_the_clusters_latency_within_bounds():
    assert inflight.patience_for(None) == inflight.PATIENCE_MIN
    assert inflight.patience_for(5) == inflight.PATIENCE_MIN
    assert inflight.patience_for(50) == pytest.approx(1.0)
    assert inflight.patience_for(10_000) == inflight.PATIENCE_MAX


def test_a_registry_that_does_not_answer_only_loses_the_guard(settings):
    settings.KUBE_INFLIGHT_URL = "redis://127.0.0.1:1/0"
    assert inflight.enter(CLUSTER_ID, patience=0.5) is None


@pytest.fixture
def frozen(db, monkeypatch):
    """A kubesim that will freeze, and a fleet.kube client for it bound to CLUSTER_ID, with
    short timeouts."""
    monkeypatch.setattr(kube.client, "REQUEST_TIMEOUT", (1.0, 3.0))
    inflight.forget(CLUSTER_ID)
    with running_kubesim(fleet=SIM_FLEET, crds_dir=CRDS_DIR) as sim:
        client = kube.KubeClient(
            kube.build_api_client(kubeconfig_path=sim.kubeconfig), name="west",
            health=ClusterHealth(None, "west"),
        )  # fmt: skip
        client.list("v1", "Namespace")  # discovery cached, latency measured
        client.health.cluster_id = CLUSTER_ID  # registered from here on (no row to write)
        yield sim, client
        sim.thaw()
        client.close()
    inflight.forget(CLUSTER_ID)


def test_a_frozen_cluster_keeps_one_waiter_and_refuses_the_rest_at_once(frozen):
    sim, client = frozen
    sim.freeze()
    outcome = {}

    def patient():
        started = time.monotonic()
        try:
            client.list("v1", "Namespace")
        except kube.TransientError as exc:
            outcome["patient"] = (type(exc), time.monotonic() - started)

    waiter = threading.Thread(target=patient)
    waiter.start()
    assert wait_until(lambda: sim.held >= 1, timeout=5, interval=0.01)
    # Sent while the first is young: impatient, it gives up after its patience, not the
    # read timeout, and does not open the breaker.
    started = time.monotonic()
    with pytest.raises(kube.ClusterBusy, match="did not answer within"):
        client.list("v1", "Namespace")
    assert time.monotonic() - started < inflight.PATIENCE_MIN + 0.5
    assert not client.health.is_open()
    # Once the first is overdue, nothing else is sent at all (the server holds no more).
    held = sim.held
    started = time.monotonic()
    with pytest.raises(kube.ClusterBusy, match="has not answered a request sent"):
        client.get("v1", "Namespace", "default")
    assert time.monotonic() - started < 0.2
    time.sleep(0.2)
    assert sim.held == held
    # The patient one waits its read timeout, and that opens the breaker.
    waiter.join(timeout=10)
    kind, waited = outcome["patient"]
    assert kind is kube.TransientError and waited >= 2.5
    assert client.health.is_open()
