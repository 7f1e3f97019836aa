"""API views for clusters (platform admins)."""

from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from fleet.api.serializers.clusters import ClusterDisableSerializer, ClusterSerializer
from fleet.permissions import IsPlatformAdmin
from fleet.selectors.clusters import cluster_list
from fleet.services.clusters import (
    CLUSTER_FIELDS,
    cluster_delete,
    cluster_disable,
    cluster_enable,
    cluster_register,
    cluster_sync_request,
    cluster_update,
)


class ClusterViewSet(viewsets.ModelViewSet):
    """Clusters the portal manages (platform admins only); `sync` queues an inventory sync."""

    serializer_class = ClusterSerializer
    permission_classes = [IsPlatformAdmin]
    filterset_fields = ["name", "scheduler"]
    ordering_fields = ["name", "last_sync_at"]
    http_method_names = ["get", "post", "patch", "put", "delete", "head", "options"]

    def get_queryset(self):
        return cluster_list(user=self.request.user)

    @staticmethod
    def _writable(serializer) -> dict:
        data = serializer.validated_data
        return {k: v for k, v in data.items() if k in CLUSTER_FIELDS}

    def perform_create(self, serializer):
        serializer.instance = cluster_register(
            actor=self.request.user, **self._writable(serializer)
        )

    def perform_update(self, serializer):
        serializer.instance = cluster_update(
            actor=self.request.user, cluster=serializer.instance, **self._writable(serializer)
        )

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "force", bool, description="Cancel the cluster's active jobs instead of refusing."
            )
        ]
    )
    def destroy(self, request, *args, **kwargs):
        """Delete the cluster from the portal: refused (400) while jobs are active on it unless
        force=true; the objects the portal keeps there are removed by a worker."""
        return super().destroy(request, *args, **kwargs)

    def perform_destroy(self, instance):
        force = self.request.query_params.get("force", "").lower() in ("1", "true", "yes")
        cluster_delete(actor=self.request.user, cluster=instance, force=force)

    @extend_schema(request=ClusterDisableSerializer, responses={200: ClusterSerializer})
    @action(detail=True, methods=["post"])
    def disable(self, request, pk=None):
        """Stop applying to the cluster (what runs keeps running; its jobs wait and say why)."""
        cluster = self.get_object()
        body = ClusterDisableSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        cluster_disable(actor=request.user, cluster=cluster, reason=body.validated_data["reason"])
        return Response(self.get_serializer(self.get_queryset().get(pk=cluster.pk)).data)

    @extend_schema(request=ClusterDisableSerializer, responses={200: ClusterSerializer})
    @action(detail=True, methods=["post"])
    def enable(self, request, pk=None):
        """Apply to the cluster again, saying why: what waited for it is sent."""
        cluster = self.get_object()
        body = ClusterDisableSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        cluster_enable(actor=request.user, cluster=cluster, reason=body.validated_data["reason"])
        return Response(self.get_serializer(self.get_queryset().get(pk=cluster.pk)).data)

    @extend_schema(
        request=None,
        responses={202: inline_serializer("SyncQueued", {"status": serializers.CharField()})},
    )
    @action(detail=True, methods=["post"])
    def sync(self, request, pk=None):
        """Queue an inventory sync of this cluster (a worker talks to the cluster)."""
        cluster = self.get_object()
        cluster_sync_request(actor=request.user, cluster=cluster)
        return Response({"status": "queued"}, status=status.HTTP_202_ACCEPTED)
