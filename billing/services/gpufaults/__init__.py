"""The GPU fault loop: from DCGM's health signals to the job owner and the bill.

The device plugin takes a failed GPU out of what a node offers, but nobody moves the work it
held, keeps new pods off the node or pays back the hours lost. Each beat tick (idempotent: a
worker killed half-way leaves rows the next tick carries on from):

1. Observe (gpu_health_observe): each GPU's last XID, double-bit ECC errors and throttling, per
   cluster, from its exporters or its Prometheus (billing.dcgm). A GPU is
   - failed: an XID in settings.GPU_FAULT_XIDS other than the one an admin accepted when
     returning it, or double-bit ECC errors beyond those accepted;
   - degraded: throttled for heat or power for more than GPU_THROTTLE_DEGRADED_SHARE of the time
     since the previous observation (shown to admins, nothing else is done);
   - else healthy.
   A change of state is a GpuHealthEvent (the history); a GPU that fails opens a GpuFault.
2. Contain (gpu_faults_contain), per open fault:
   - taint its node NoSchedule with the portal's key (fleet.services.node_taints says why a
     taint and not a cordon), so no new pod of the pool lands there;
   - for every job that held the GPU (the exporter's pod labels, and the pods whose GPU UUIDs
     the sync recorded), in one transaction per job: stop it (failed, its objects deleted),
     resubmit it as its owner (the copy keeps its checkpoint volume and path, so it resumes
     from its last checkpoint; one without starts over), and credit its team the GPU-hours
     its pods had held since they started, at the price book's price for the job's GPU model
     at the fault (GpuFaultCredit, the line finance audits); then tell the owner and the
     team's leads (e-mail, the team webhook, a notice on the job page).
3. Return (gpu_node_return_request by a platform admin, then gpu_node_return_finish): the
   taint is removed and the node's GPUs count as healthy again, their current XID and error
   count accepted (the exporter keeps reporting the last XID until the GPU is reset).
"""

from billing.services.gpufaults.contain import (
    gpu_fault_contain,
    gpu_fault_text,
    gpu_faults_contain_all,
)
from billing.services.gpufaults.observe import gpu_health_observe, gpu_health_read
from billing.services.gpufaults.returns import (
    gpu_node_return_finish,
    gpu_node_return_request,
    gpu_nodes_return_all,
)

__all__ = [
    "gpu_fault_contain",
    "gpu_fault_text",
    "gpu_faults_contain_all",
    "gpu_health_observe",
    "gpu_health_read",
    "gpu_node_return_finish",
    "gpu_node_return_request",
    "gpu_nodes_return_all",
]
