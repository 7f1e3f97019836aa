"""GPU faults in kubesim (issue #35): an injected fault shows in the DCGM exporter on that GPU
only (XID, double-bit ECC errors, throttling counters that grow with the clock), a repair clears
it, the HTTP knob does the same, and faults drawn from a seed are the same for the same seed."""

import pytest
import requests

from billing import dcgm
from kubesim.controllers import running
from kubesim.fleet import load_fleet
from kubesim.testing import running_kubesim
from tests.kubesim.conftest import CRDS_DIR
from tests.kubesim.kueue_helpers import wait_for

FLEET = {
    "pools": [
        {"name": "a100", "gpuModel": "NVIDIA A100-SXM4-80GB", "nodes": 2, "gpusPerNode": 4,
         "labels": {"accelerator": "a100"}},
    ]
}  # fmt: skip


def _health(sim) -> dict[tuple[str, int], dcgm.GpuHealthSample]:
    samples = dcgm.scrape_health(f"{sim.url}/metrics/dcgm")
    return {(s.node, s.gpu_index): s for s in samples}


def test_an_injected_fault_shows_on_its_gpu_only_and_a_repair_clears_it():
    with running_kubesim(fleet=FLEET, crds_dir=CRDS_DIR) as sim:
        before = _health(sim)
        assert len(before) == 8
        assert all(s.xid == 0 and s.ecc_dbe == 0 and s.thermal_ns == 0 for s in before.values())
        sim.gpu_fault("a100-node-1", 2, "xid:79")
        sim.gpu_fault("a100-node-0", 1, "ecc")
        sim.gpu_fault("a100-node-0", 3, "thermal")
        t0 = sim.clock.timestamp()
        sim.clock.advance(100)
        after = _health(sim)
        assert after[("a100-node-1", 2)].xid == 79
        assert (after[("a100-node-0", 1)].xid, after[("a100-node-0", 1)].ecc_dbe) == (48, 1)
        # Throttled 60 % of the 100 s since: 60 s in ns.
        elapsed = sim.clock.timestamp() - t0
        assert after[("a100-node-0", 3)].thermal_ns == pytest.approx(0.6 * elapsed * 1e9, rel=0.01)
        assert after[("a100-node-0", 3)].xid == 0 and after[("a100-node-0", 3)].power_ns == 0
        faulty = {("a100-node-1", 2), ("a100-node-0", 1), ("a100-node-0", 3)}
        assert all(s.xid == 0 and s.ecc_dbe == 0 for k, s in after.items() if k not in faulty)

        sim.gpu_repair("a100-node-1", 2)
        sim.gpu_repair("a100-node-0", 3)
        thermal = _health(sim)[("a100-node-0", 3)].thermal_ns
        sim.clock.advance(50)
        repaired = _health(sim)
        assert repaired[("a100-node-1", 2)].xid == 0
        assert repaired[("a100-node-0", 3)].thermal_ns == thermal  # stopped growing, kept
        assert repaired[("a100-node-0", 1)].ecc_dbe == 1  # a counter never goes back


def test_the_http_knob_injects_and_refuses_bad_input():
    with running_kubesim(fleet=FLEET, crds_dir=CRDS_DIR) as sim:
        url = f"{sim.url}/kubesim/gpu-faults"
        ok = requests.post(url, params={"node": "a100-node-0", "gpu": "0", "kind": "xid:94"})
        assert ok.status_code == 200 and ok.json()["figures"][dcgm.XID] == 94
        assert _health(sim)[("a100-node-0", 0)].xid == 94
        bad = requests.post(url, params={"node": "a100-node-0", "gpu": "0", "kind": "melted"})
        assert bad.status_code == 400
        assert requests.post(url, params={"gpu": "0"}).status_code == 400
        requests.post(url, params={"node": "a100-node-0", "gpu": "0", "kind": "repair"})
        assert _health(sim)[("a100-node-0", 0)].xid == 0


def test_drawn_faults_follow_their_seed():
    fleet = {"pools": [{**FLEET["pools"][0], "gpuFaults": {"meanSeconds": 600, "seed": 11}}]}
    annotations = [n["metadata"]["annotations"] for n in load_fleet(fleet)]
    assert all('"seed": 11' in a["kubesim.dev/gpu-faults"] for a in annotations)
    runs = []
    for _ in range(2):
        with running_kubesim(fleet=fleet, crds_dir=CRDS_DIR) as sim:
            faults = running(sim.store).gpufaults
            wait_for(lambda f=faults: len(f.plans) == 2, message="plans")
            start = sim.clock.timestamp()
            for _ in range(6):  # the next six drawn faults, whichever nodes they hit
                sim.step()
            drawn = sorted(
                (round(at - start), node, gpu, kind)
                for (node, gpu), state in faults.gpus.items()
                for at, kind in state.history
            )
            runs.append(drawn)
    assert len(runs[0]) >= 4
    # The same seed: the same GPUs fail the same way at the same simulated times (± the
    # moment each run's controllers saw the nodes).
    assert [r[1:] for r in runs[0]] == [r[1:] for r in runs[1]]
    assert all(abs(a[0] - b[0]) <= 2 for a, b in zip(runs[0], runs[1], strict=True))


def test_the_xid_count_counts_each_code_in_the_exporters_window():
    """DCGM_EXP_XID_ERRORS_COUNT: a series per GPU and XID code while XIDs of that code fall in
    the last five minutes, the same XID twice counted twice (the last-XID gauge shows it once),
    an ECC fault as its XID 48, and nothing once the window has passed."""
    with running_kubesim(fleet=FLEET, crds_dir=CRDS_DIR) as sim:
        assert "DCGM_EXP_XID_ERRORS_COUNT" not in requests.get(f"{sim.url}/metrics/dcgm").text
        sim.gpu_fault("a100-node-1", 2, "xid:79")
        sim.clock.advance(100)
        sim.gpu_fault("a100-node-1", 2, "xid:79")
        sim.gpu_fault("a100-node-0", 1, "ecc")
        text = requests.get(f"{sim.url}/metrics/dcgm").text
        assert 'err_code="79",err_msg="GPU has fallen off the bus"} 2' in text
        health = _health(sim)
        assert health[("a100-node-1", 2)].xid == 79
        assert health[("a100-node-1", 2)].xid_counts == {79: 2}
        assert health[("a100-node-0", 1)].xid_counts == {48: 1}
        assert all(not s.xid_counts for k, s in health.items()
                   if k not in {("a100-node-1", 2), ("a100-node-0", 1)})  # fmt: skip
        sim.clock.advance(250)  # the first XID 79 is 350 s old, the others 250 s
        assert _health(sim)[("a100-node-1", 2)].xid_counts == {79: 1}
        sim.clock.advance(100)
        assert all(not s.xid_counts for s in _health(sim).values())
        assert _health(sim)[("a100-node-1", 2)].xid == 79  # the gauge keeps the last one
