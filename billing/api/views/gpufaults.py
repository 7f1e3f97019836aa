"""GPU health API (platform admins): nodes with their GPUs' health, one node's faults, credits
and history, and returning a node to service (POST, audited)."""

from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound, PermissionDenied
from rest_framework.response import Response
from rest_framework.views import APIView

from billing.models import GpuHealth
from billing.selectors.gpufaults import gpu_health_node, gpu_health_nodes
from billing.services.gpufaults import gpu_node_return_request
from core.roles import is_platform_admin
from fleet.models import Cluster


class ReturnSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=2000)


def _gpu(row: GpuHealth) -> dict:
    return {
        "index": row.gpu_index, "uuid": row.gpu_uuid, "model": row.model_name,
        "state": row.state, "reason": row.reason, "last_xid": row.last_xid,
        "recent_xids": row.xid_counts,
        "ecc_dbe_total": row.ecc_dbe_total, "thermal_share": row.thermal_share,
        "power_share": row.power_share, "observed_at": row.observed_at.isoformat(),
        "state_since": row.state_since.isoformat(),
    }  # fmt: skip


def _fault(fault) -> dict:
    return {
        "id": fault.pk, "gpu_index": fault.gpu_index, "gpu_uuid": fault.gpu_uuid,
        "xid": fault.xid, "reason": fault.reason, "state": fault.state,
        "detected_at": fault.detected_at.isoformat(),
        "tainted_at": fault.tainted_at and fault.tainted_at.isoformat(),
        "returned_at": fault.returned_at and fault.returned_at.isoformat(),
        "return_reason": fault.return_reason, "last_error": fault.last_error,
        "credits": [
            {"job": c.job_id, "team": c.team.slug, "gpu_seconds_lost": c.gpu_seconds_lost,
             "checkpoint_at": c.checkpoint_at and c.checkpoint_at.isoformat(),
             "amount": str(c.amount), "currency": c.currency,
             "resubmitted_job": c.resubmitted_job_id, "resubmit_error": c.resubmit_error}
            for c in fault.credits.all()
        ],
    }  # fmt: skip


def _require_admin(request) -> None:
    # Before any lookup: whoever else asks learns nothing, not even which clusters exist.
    if not is_platform_admin(request.user):
        raise PermissionDenied("Only platform admins see GPU health and return nodes to service.")


def _detail(request, cluster_id: int, node: str) -> dict:
    _require_admin(request)
    cluster = get_object_or_404(Cluster, pk=cluster_id)
    try:
        return gpu_health_node(user=request.user, cluster=cluster, node=node)
    except GpuHealth.DoesNotExist as exc:
        raise NotFound(str(exc)) from exc


class GpuHealthListView(APIView):
    """Every node with GPUs: its GPUs' health, open faults and whether the portal's taint is on."""

    @extend_schema(
        operation_id="v1_billing_gpu_health_list",
        responses={200: {"type": "array", "items": {"type": "object"}}},
    )
    def get(self, request):
        nodes = gpu_health_nodes(user=request.user)
        return Response([
            {"cluster": n["cluster"], "node": n["node"], "state": n["worst"],
             "open_faults": n["faults"], "tainted": n["tainted"],
             "gpus": [_gpu(g) for g in n["gpus"]]}
            for n in nodes
        ])  # fmt: skip


class GpuHealthNodeView(APIView):
    """One node: its GPUs, faults (with the jobs they hit and the credits) and history."""

    @extend_schema(operation_id="v1_billing_gpu_health_node", responses=OpenApiTypes.OBJECT)
    def get(self, request, cluster_id: int, node: str):
        d = _detail(request, cluster_id, node)
        return Response({
            "cluster": d["cluster"].name, "node": d["node"], "tainted": d["tainted"],
            "gpus": [_gpu(g) for g in d["gpus"]],
            "faults": [_fault(f) for f in d["faults"]],
            "history": [{"at": e.at.isoformat(), "gpu_index": e.gpu_index, "state": e.state,
                         "reason": e.reason} for e in d["history"]],
        })  # fmt: skip


class GpuNodeReturnView(APIView):
    """Return a node to service: the worker removes the portal's taint (202; audited)."""

    @extend_schema(request=ReturnSerializer, responses=OpenApiTypes.OBJECT)
    def post(self, request, cluster_id: int, node: str):
        _require_admin(request)
        cluster = get_object_or_404(Cluster, pk=cluster_id)
        serializer = ReturnSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        # A service ValidationError becomes the 400 with field errors (core.api's handler).
        count = gpu_node_return_request(cluster=cluster, node=node, actor=request.user,
                                        reason=serializer.validated_data["reason"])  # fmt: skip
        return Response({"node": node, "faults_returning": count}, status=status.HTTP_202_ACCEPTED)
