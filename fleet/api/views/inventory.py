"""API views for the inventory: pools (everyone reads), nodes (admins) and GPU models."""

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.response import Response

from core.permissions import IsPlatformAdminOrReadOnly
from fleet.api.serializers.inventory import (
    GpuModelSerializer,
    NodeSerializer,
    PoolSerializer,
    PoolWriteSerializer,
)
from fleet.filters import NodeFilter, PoolFilter
from fleet.permissions import IsPlatformAdmin
from fleet.selectors.inventory import (
    gpu_model_list,
    node_list,
    pool_list,
    pool_stats,
    pool_worker_sizes,
)
from fleet.services.pools import pool_create, pool_update


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
    admin_writes = "node pools and GPU models"
    filterset_class = PoolFilter
    ordering_fields = ["name"]

    def get_queryset(self):
        return pool_list(user=self.request.user)

    def get_serializer_class(self):
        if self.action in ("create", "update", "partial_update"):
            return PoolWriteSerializer
        return PoolSerializer

    def _out(self, pools, *, many=False):
        listed = pools if many else [pools]
        context = {"stats": pool_stats(pools=listed), "sizes": pool_worker_sizes(pools=listed)}
        return PoolSerializer(pools, many=many, context=context).data

    def list(self, request, *args, **kwargs):
        pools = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        return self.get_paginated_response(self._out(pools, many=True))

    def retrieve(self, request, *args, **kwargs):
        return Response(self._out(self.get_object()))

    @extend_schema(request=PoolWriteSerializer, responses={201: PoolSerializer})
    def create(self, request, *args, **kwargs):
        serializer = PoolWriteSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        pool = pool_create(actor=request.user, **serializer.validated_data)
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
            sent = (
                set(request.data)
                | {f"{k}_millis" for k in request.data}
                | {f"{k}_mib" for k in request.data}
            )
            changes = {k: v for k, v in changes.items() if k in sent}
        pool = pool_update(actor=request.user, pool=pool, **changes)
        return Response(self._out(pool))


class NodeViewSet(viewsets.ReadOnlyModelViewSet):
    """Nodes from the last inventory sync (platform admins only)."""

    serializer_class = NodeSerializer
    permission_classes = [IsPlatformAdmin]
    filterset_class = NodeFilter
    ordering_fields = ["name"]

    def get_queryset(self):
        return node_list(user=self.request.user)


class GpuModelViewSet(viewsets.ReadOnlyModelViewSet):
    """The GPU model catalogue."""

    serializer_class = GpuModelSerializer
    filterset_fields = ["name"]

    def get_queryset(self):
        return gpu_model_list(user=self.request.user)
