"""Stage 3 of the GPU fault loop: a platform admin returns a node to service; the worker
removes the taint and accepts its GPUs' figures (see the package's docstring)."""

from __future__ import annotations

import logging
from datetime import datetime

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from billing.models import GpuFault, GpuHealth, GpuHealthEvent
from core.roles import is_platform_admin
from fleet import kube
from fleet.models import Cluster
from fleet.services.node_taints import GPU_FAULT_TAINT_KEY, node_taint_remove
from queues.services.audit import audit

log = logging.getLogger(__name__)
H = GpuHealth.State
F = GpuFault.State


def gpu_node_return_request(*, cluster: Cluster, node: str, actor, reason: str) -> int:
    """A platform admin returns a node to service: its faults are marked returning (the
    worker removes the taint); returns how many. Raises PermissionDenied, ValidationError."""
    if not is_platform_admin(actor):
        raise PermissionDenied("Only platform admins return a node to service.")
    reason = " ".join((reason or "").split())
    if not reason:
        raise ValidationError({"reason": ["Say why the node can run jobs again (kept in the "
                                          "audit log)."]})  # fmt: skip
    with transaction.atomic():
        faults = list(
            GpuFault.objects.select_for_update().filter(
                cluster=cluster, node_name=node, state__in=[F.OPEN, F.CONTAINED]
            )
        )
        if not faults:
            raise ValidationError({"node": [f"Node {node} has no fault to return from."]})
        for fault in faults:
            fault.state, fault.return_requested_by = F.RETURNING, actor
            fault.return_reason = reason[:2000]
            fault.save(update_fields=["state", "return_requested_by", "return_reason"])
        audit(actor=actor, verb="node.return_to_service", obj=faults[0], message=reason,
              after={"cluster": cluster.name, "node": node,
                     "faults": [f.pk for f in faults]})  # fmt: skip
        transaction.on_commit(_enqueue_return)
    return len(faults)


def _enqueue_return() -> None:
    from billing.tasks import gpu_fault_loop

    gpu_fault_loop.delay()


def gpu_node_return_finish(*, cluster: Cluster, node: str, now: datetime | None = None) -> bool:
    """Remove the taint of a node whose faults are returning and accept its GPUs' figures;
    True when done. Raises kube.KubeError when the cluster does not answer."""
    now = now or timezone.now()
    faults = GpuFault.objects.filter(cluster=cluster, node_name=node, state=F.RETURNING)
    if not faults.exists():
        return False
    node_taint_remove(cluster=cluster, node=node, key=GPU_FAULT_TAINT_KEY)
    with transaction.atomic():
        returning = list(faults.select_for_update())
        if not returning:
            return False
        for row in GpuHealth.objects.select_for_update().filter(cluster=cluster, node_name=node):
            row.xid_accepted, row.dbe_accepted = row.last_xid, row.ecc_dbe_total
            if row.state == H.FAILED:
                row.state, row.reason, row.state_since = H.HEALTHY, "", now
                GpuHealthEvent.objects.create(
                    cluster=cluster, node_name=node, gpu_uuid=row.gpu_uuid,
                    gpu_index=row.gpu_index, at=now, state=H.HEALTHY,
                    reason=f"returned to service by {returning[0].return_requested_by}: "
                    f"{returning[0].return_reason}",
                )  # fmt: skip
            row.save()
        GpuFault.objects.filter(pk__in=[f.pk for f in returning]).update(
            state=F.RETURNED, returned_at=now, last_error=""
        )
        audit(
            actor=returning[0].return_requested_by,
            verb="node.untaint",
            obj=returning[0],
            message=f"Node {node}: taint {GPU_FAULT_TAINT_KEY} removed, back in service.",
        )
    return True


def gpu_nodes_return_all(*, now: datetime | None = None) -> int:
    done = 0
    pairs = GpuFault.objects.filter(state=F.RETURNING, cluster__enabled=True).values_list(
        "cluster_id", "node_name"
    )
    for cluster_id, node in sorted(set(pairs)):
        cluster = Cluster.objects.get(pk=cluster_id)
        try:
            done += int(gpu_node_return_finish(cluster=cluster, node=node, now=now))
        except kube.KubeError as exc:
            log.warning("returning %s/%s: %s", cluster.name, node, exc)
            GpuFault.objects.filter(cluster=cluster, node_name=node, state=F.RETURNING).update(
                last_error=str(exc)[:2000]
            )
    return done
