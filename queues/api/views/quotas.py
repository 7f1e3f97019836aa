"""REST API for quota governance: quota requests and decisions, quotas, tiers, audit events."""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from billing.selectors.evidence import quota_evidence
from core.roles import is_manager, is_platform_admin
from queues.api.serializers.quotas import (
    AuditEventSerializer,
    PriorityTierSerializer,
    QuotaRequestApproveSerializer,
    QuotaRequestCreateSerializer,
    QuotaRequestRejectSerializer,
    QuotaRequestSerializer,
    QuotaSerializer,
)
from queues.models import PriorityTier, QuotaAutoApproval
from queues.permissions import IsPlatformAdminOrReadOnly
from queues.selectors import quotas as selectors
from queues.selectors.audit import audit_event_list
from queues.selectors.tenancy import team_list
from queues.services import quotas as services
from queues.services.quota_auto import RULE_FIELDS, auto_approval_rule, quota_auto_approval_set
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


class AutoApprovalSerializer(serializers.ModelSerializer):
    updated_at = serializers.DateTimeField(read_only=True, allow_null=True)

    class Meta:
        model = QuotaAutoApproval
        fields = [*RULE_FIELDS, "updated_at"]
        read_only_fields = ["updated_at"]


class QuotaAutoApprovalView(APIView):
    """The rule that approves quota increases on evidence: everyone reads it, platform admins
    change it (PATCH: only the fields given)."""

    permission_classes = [IsPlatformAdminOrReadOnly]
    admin_writes = "the quota auto-approval rule"
    serializer_class = AutoApprovalSerializer

    def get(self, request):
        return Response(AutoApprovalSerializer(auto_approval_rule()).data)

    def patch(self, request):
        data = AutoApprovalSerializer(data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        rule = quota_auto_approval_set(actor=request.user, **data.validated_data)
        return Response(AutoApprovalSerializer(rule).data)


class QuotaRecommendationsView(APIView):
    """Evidence per team and pool (use p50/p90/peak, borrowing, idle share) and the
    recommendations it supports: managers (their departments' teams) and platform admins."""

    @extend_schema(
        parameters=[OpenApiParameter("days", int, description="Lookback (1–365, default 30)")],
        responses=OpenApiTypes.OBJECT,
    )
    def get(self, request):
        if not (is_manager(request.user) or is_platform_admin(request.user)):
            raise PermissionDenied("Quota recommendations are for managers and platform admins.")
        raw = request.query_params.get("days", "30")
        if not raw.isdigit() or not 1 <= int(raw) <= 365:
            raise ValidationError({"days": ["Give a number of days from 1 to 365."]})
        rows = quota_evidence(teams=list(team_list(user=request.user)), days=int(raw))
        items = [
            {
                "team": r["team"].slug,
                "pool": r["pool"].name if r["pool"] else None,
                **r["figures"],
                "recommendations": r["recommendations"],
            }  # fmt: skip
            for r in rows
        ]
        return Response({"days": int(raw), "items": items})
