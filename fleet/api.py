"""REST API for fleet under /api/v1/: pools (everyone reads), clusters and nodes (admins)."""

import django_filters
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from fleet import selectors, services
from fleet.models import Node, NodePool
from fleet.permissions import IsPlatformAdmin, IsPlatformAdminOrReadOnly
from fleet.serializers import (
    ClusterSerializer,
    GpuModelSerializer,
    NodeSerializer,
    PoolSerializer,
    PoolWriteSerializer,
)


class PoolFilter(django_filters.FilterSet):
    cluster = django_filters.CharFilter(field_name="cluster__name")
    gpu_model = django_filters.CharFilter(field_name="gpu_model__name")

    class Meta:
        model = NodePool
        fields = ["name", "cluster", "gpu_model", "capacity_type", "interconnect"]


class NodeFilter(django_filters.FilterSet):
    cluster = django_filters.CharFilter(field_name="cluster__name")
    pool = django_filters.CharFilter(field_name="pool__name")
    unpooled = django_filters.BooleanFilter(field_name="pool", lookup_expr="isnull")

    class Meta:
        model = Node
        fields = ["cluster", "pool", "unpooled", "unschedulable", "ready"]


class ClusterViewSet(viewsets.ModelViewSet):
    """Clusters the portal manages (platform admins only); `sync` queues an inventory sync."""

    serializer_class = ClusterSerializer
    permission_classes = [IsPlatformAdmin]
    filterset_fields = ["name", "scheduler"]
    ordering_fields = ["name", "last_sync_at"]
    http_method_names = ["get", "post", "patch", "put", "delete", "head", "options"]

    def get_queryset(self):
        return selectors.cluster_list(user=self.request.user)

    @staticmethod
    def _writable(serializer) -> dict:
        data = serializer.validated_data
        return {k: v for k, v in data.items() if k in services.CLUSTER_FIELDS}

    def perform_create(self, serializer):
        serializer.instance = services.cluster_register(
            actor=self.request.user, **self._writable(serializer)
        )

    def perform_update(self, serializer):
        serializer.instance = services.cluster_update(
            actor=self.request.user, cluster=serializer.instance, **self._writable(serializer)
        )

    def perform_destroy(self, instance):
        services.cluster_delete(actor=self.request.user, cluster=instance)

    @extend_schema(
        request=None,
        responses={202: inline_serializer("SyncQueued", {"status": serializers.CharField()})},
    )
    @action(detail=True, methods=["post"])
    def sync(self, request, pk=None):
        """Queue an inventory sync of this cluster (a worker talks to the cluster)."""
        cluster = self.get_object()
        services.cluster_sync_request(actor=request.user, cluster=cluster)
        return Response({"status": "queued"}, status=status.HTTP_202_ACCEPTED)


class PoolViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    viewsets.GenericViewSet,
):
    """Node pools with live GPU figures; everyone reads, platform admins create and change."""

    serializer_class = PoolSerializer
    permission_classes = [IsPlatformAdminOrReadOnly]
    filterset_class = PoolFilter
    ordering_fields = ["name"]

    def get_queryset(self):
        return selectors.pool_list(user=self.request.user)

    def get_serializer_class(self):
        if self.action in ("create", "update", "partial_update"):
            return PoolWriteSerializer
        return PoolSerializer

    def _out(self, pools, *, many=False):
        stats = selectors.pool_stats(pools=pools if many else [pools])
        return PoolSerializer(pools, many=many, context={"stats": stats}).data

    def list(self, request, *args, **kwargs):
        pools = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        return self.get_paginated_response(self._out(pools, many=True))

    def retrieve(self, request, *args, **kwargs):
        return Response(self._out(self.get_object()))

    @extend_schema(request=PoolWriteSerializer, responses={201: PoolSerializer})
    def create(self, request, *args, **kwargs):
        serializer = PoolWriteSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        pool = services.pool_create(actor=request.user, **serializer.validated_data)
        return Response(self._out(pool), status=status.HTTP_201_CREATED)

    @extend_schema(request=PoolWriteSerializer, responses=PoolSerializer)
    def update(self, request, *args, **kwargs):
        pool = self.get_object()
        partial = kwargs.pop("partial", False)
        serializer = PoolWriteSerializer(data=request.data, partial=partial)
        serializer.is_valid(raise_exception=True)
        changes = dict(serializer.validated_data)
        if "cluster" in changes and changes["cluster"] != pool.cluster:
            return Response(
                {"cluster": ["A pool cannot move to another cluster; create a new pool."]},
                status=status.HTTP_400_BAD_REQUEST,
            )
        changes.pop("cluster", None)
        if partial:
            # Defaults of fields the caller left out must not overwrite what is stored.
            changes = {k: v for k, v in changes.items() if k in request.data}
        pool = services.pool_update(actor=request.user, pool=pool, **changes)
        return Response(self._out(pool))


class NodeViewSet(viewsets.ReadOnlyModelViewSet):
    """Nodes from the last inventory sync (platform admins only)."""

    serializer_class = NodeSerializer
    permission_classes = [IsPlatformAdmin]
    filterset_class = NodeFilter
    ordering_fields = ["name"]

    def get_queryset(self):
        return selectors.node_list(user=self.request.user)


class GpuModelViewSet(viewsets.ReadOnlyModelViewSet):
    """The GPU model catalogue."""

    serializer_class = GpuModelSerializer
    filterset_fields = ["name"]

    def get_queryset(self):
        return selectors.gpu_model_list(user=self.request.user)
