"""REST API for quota governance: quota requests and decisions, quotas, tiers, audit events."""

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from core.permissions import IsPlatformAdminOrReadOnly
from queues.api.serializers.quotas import (
    AuditEventSerializer,
    PriorityTierSerializer,
    QuotaRequestApproveSerializer,
    QuotaRequestCreateSerializer,
    QuotaRequestRejectSerializer,
    QuotaRequestSerializer,
    QuotaSerializer,
)
from queues.models import PriorityTier
from queues.selectors import quotas as selectors
from queues.selectors.audit import audit_event_list
from queues.services import quotas as services
from queues.services.tiers import tier_save


class QuotaRequestViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    viewsets.GenericViewSet,
):
    """Quota requests of the teams the caller sees; members file, department managers decide."""

    serializer_class = QuotaRequestSerializer
    filterset_fields = ["state", "team__slug", "pool"]
    ordering_fields = ["created_at", "decided_at"]

    def get_queryset(self):
        return selectors.quota_request_list(user=self.request.user)

    @extend_schema(request=QuotaRequestCreateSerializer, responses={201: QuotaRequestSerializer})
    def create(self, request):
        serializer = QuotaRequestCreateSerializer(data=request.data, context={"request": request})
        serializer.is_valid(raise_exception=True)
        quota_request = services.quota_request_create(
            actor=request.user, **serializer.validated_data
        )
        return Response(QuotaRequestSerializer(quota_request).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=QuotaRequestApproveSerializer, responses=QuotaRequestSerializer)
    @action(detail=True, methods=["post"])
    def approve(self, request, pk=None):
        """Approve; numbers left out are granted as requested, given ones trim the grant."""
        quota_request = self.get_object()
        serializer = QuotaRequestApproveSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        quota_request = services.quota_request_approve(
            quota_request=quota_request, approver=request.user, **serializer.validated_data
        )
        return Response(QuotaRequestSerializer(quota_request).data)

    @extend_schema(request=None, responses=QuotaRequestSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        """Withdraw a pending request (its requester or a lead of the team)."""
        quota_request = services.quota_request_cancel(
            quota_request=self.get_object(), actor=request.user
        )
        return Response(QuotaRequestSerializer(quota_request).data)

    @extend_schema(request=QuotaRequestRejectSerializer, responses=QuotaRequestSerializer)
    @action(detail=True, methods=["post"])
    def reject(self, request, pk=None):
        """Reject with a reason the team can read."""
        quota_request = self.get_object()
        serializer = QuotaRequestRejectSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        quota_request = services.quota_request_reject(
            quota_request=quota_request,
            approver=request.user,
            reason=serializer.validated_data["reason"],
        )
        return Response(QuotaRequestSerializer(quota_request).data)


class QuotaViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Quotas of the teams the caller sees (read-only: quota changes go through requests)."""

    serializer_class = QuotaSerializer
    filterset_fields = ["team__slug", "pool"]

    def get_queryset(self):
        return selectors.quota_list(user=self.request.user)


class PriorityTierViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    viewsets.GenericViewSet,
):
    """Priority tiers: everyone reads, platform admins create and change them."""

    serializer_class = PriorityTierSerializer
    permission_classes = [IsPlatformAdminOrReadOnly]
    admin_writes = "priority tiers"
    queryset = PriorityTier.objects.order_by("-value")
    filterset_fields = ["name"]

    def perform_create(self, serializer):
        serializer.instance = tier_save(actor=self.request.user, **serializer.validated_data)

    def perform_update(self, serializer):
        serializer.instance = tier_save(
            actor=self.request.user, tier=serializer.instance, **serializer.validated_data
        )


class AuditEventViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Audit events: platform admins see all, managers their departments'."""

    serializer_class = AuditEventSerializer
    filterset_fields = ["verb", "object_type", "team__slug", "department__slug"]

    def get_queryset(self):
        return audit_event_list(user=self.request.user)
