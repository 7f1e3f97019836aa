"""Reads of the GPU fault loop: GPU health per node with history (platform admins), the credits
of a month (the report), and what a job's page says about a fault that hit it."""

from __future__ import annotations

from collections import defaultdict
from datetime import date
from decimal import Decimal

from django.core.exceptions import PermissionDenied
from django.db.models import Q

from billing.models import GpuFault, GpuFaultCredit, GpuHealth, GpuHealthEvent
from billing.periods import month_bounds
from billing.pricing import gpu_hours
from core.roles import is_platform_admin
from fleet.models import Cluster, Node
from fleet.services.node_taints import GPU_FAULT_TAINT_KEY
from queues.models import Job

OPEN = (GpuFault.State.OPEN, GpuFault.State.CONTAINED, GpuFault.State.RETURNING)
HISTORY = 50  # events shown per node


def _require_admin(user) -> None:
    if not is_platform_admin(user):
        raise PermissionDenied("Only platform admins see GPU health.")


def gpu_health_nodes(*, user) -> list[dict]:
    """Every node with GPUs the loop has seen: its GPUs by state, its open faults, its taint."""
    _require_admin(user)
    nodes: dict[tuple[int, str], dict] = {}
    for row in GpuHealth.objects.select_related("cluster").order_by(
        "cluster__name", "node_name", "gpu_index"
    ):
        entry = nodes.setdefault(
            (row.cluster_id, row.node_name),
            {"cluster": row.cluster.name, "node": row.node_name, "gpus": [], "faults": 0,
             "worst": GpuHealth.State.HEALTHY},
        )  # fmt: skip
        entry["gpus"].append(row)
        if row.state == GpuHealth.State.FAILED or (
            row.state == GpuHealth.State.DEGRADED and entry["worst"] == GpuHealth.State.HEALTHY
        ):
            entry["worst"] = row.state
    for cluster_id, node in GpuFault.objects.filter(state__in=OPEN).values_list(
        "cluster_id", "node_name"
    ):
        if (cluster_id, node) in nodes:
            nodes[(cluster_id, node)]["faults"] += 1
    tainted = _tainted(list(nodes))
    for key, entry in nodes.items():
        entry["tainted"] = key in tainted
    return list(nodes.values())


def _tainted(keys: list[tuple[int, str]]) -> set[tuple[int, str]]:
    """Which of these nodes carry the portal's fault taint, as the inventory sync last saw."""
    names = {name for _, name in keys}
    out = set()
    for cluster_id, name, taints in Node.objects.filter(name__in=names).values_list(
        "cluster_id", "name", "taints"
    ):
        if any(t.get("key") == GPU_FAULT_TAINT_KEY for t in taints or []):
            out.add((cluster_id, name))
    return out


def gpu_health_node(*, user, cluster: Cluster, node: str) -> dict:
    """One node's GPUs, faults (with the jobs they hit and the credits) and health history.
    Raises GpuHealth.DoesNotExist for a node the loop never saw."""
    _require_admin(user)
    gpus = list(GpuHealth.objects.filter(cluster=cluster, node_name=node).order_by("gpu_index"))
    if not gpus:
        raise GpuHealth.DoesNotExist(f"No GPU health for node {node}.")
    faults = list(
        GpuFault.objects.filter(cluster=cluster, node_name=node)
        .select_related("return_requested_by")
        .prefetch_related("credits__job", "credits__team")
    )
    history = list(
        GpuHealthEvent.objects.filter(cluster=cluster, node_name=node).order_by("-at", "-pk")[
            :HISTORY
        ]
    )
    return {
        "cluster": cluster,
        "node": node,
        "gpus": gpus,
        "faults": faults,
        "history": history,
        "tainted": bool(_tainted([(cluster.pk, node)])),
        "returnable": any(
            f.state in (GpuFault.State.OPEN, GpuFault.State.CONTAINED) for f in faults
        ),  # fmt: skip
    }


def gpu_fault_credits_month(*, month: date, team_ids: list[int] | None = None) -> dict:
    """Per team: the GPU-hours and money credited for faults detected in the month, and one
    line per credit (fault, job, node, GPU, hours, amount) for finance to audit."""
    start, end = month_bounds(month)
    rows = GpuFaultCredit.objects.filter(
        fault__detected_at__gte=start, fault__detected_at__lt=end
    ).select_related("fault", "job")
    if team_ids is not None:
        rows = rows.filter(team_id__in=team_ids)
    out: dict[int, dict] = defaultdict(lambda: {"seconds": 0, "credit": Decimal(0), "lines": []})
    for row in rows.order_by("fault__detected_at", "pk"):
        entry = out[row.team_id]
        entry["seconds"] += row.gpu_seconds_lost
        entry["credit"] += row.amount
        fault = row.fault
        entry["lines"].append(
            {
                "credit_id": row.pk,
                "fault_id": fault.pk,
                "job_id": row.job_id,
                "job_name": row.job.name,
                "cluster_node": fault.node_name,
                "gpu_index": fault.gpu_index,
                "reason": fault.reason,
                "detected_at": fault.detected_at.isoformat(),
                "gpu_hours": str(gpu_hours(row.gpu_seconds_lost)),
                "checkpoint_at": row.checkpoint_at and row.checkpoint_at.isoformat(),
                "price_per_hour": None if row.price_per_hour is None else str(row.price_per_hour),
                "amount": str(row.amount),
                "currency": row.currency,
            }
        )
    return {
        team_id: {
            "gpu_hours": str(gpu_hours(entry["seconds"])),
            "credit": str(entry["credit"]),
            "lines": entry["lines"],
        }
        for team_id, entry in out.items()
    }


def gpu_fault_notices(*, job: Job) -> list[dict]:
    """What the job's page says about faults: this job stopped by one, or resubmitted after
    one (the job itself is already visible to whoever asks)."""
    rows = GpuFaultCredit.objects.filter(Q(job=job) | Q(resubmitted_job=job)).select_related(
        "fault", "job"
    )
    return [
        {
            "stopped": row.job_id == job.pk,
            "fault": row.fault,
            "credit": row,
            "gpu_hours": gpu_hours(row.gpu_seconds_lost),
        }
        for row in rows.order_by("created_at")
    ]
