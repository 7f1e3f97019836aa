"""API of quota recommendations: the evidence per team and pool, and the auto-approval rule."""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from core.permissions import IsPlatformAdminOrReadOnly
from core.roles import is_manager, is_platform_admin
from core.text import ascii_digits
from planning.models import QuotaAutoApproval
from planning.selectors.evidence import quota_evidence
from planning.services.auto_approval import (
    RULE_FIELDS,
    auto_approval_rule,
    quota_auto_approval_set,
)
from queues.selectors.tenancy import team_list


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
        if not ascii_digits(raw) or not 1 <= int(raw) <= 365:
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
