"""Billing REST API: usage, monthly reports (JSON, CSV, XLSX, FOCUS), prices and budgets."""

import json

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.exceptions import NotFound, PermissionDenied, ValidationError
from rest_framework.renderers import BaseRenderer, BrowsableAPIRenderer, JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from billing import reports, selectors, services
from billing.models import Budget
from billing.permissions import FinanceWritesOthersRead
from billing.serializers import (
    BudgetInputSerializer,
    BudgetSerializer,
    GpuPriceSerializer,
    UsageQuerySerializer,
    parse_month,
)
from queues.models import Team


class _FileRenderer(BaseRenderer):
    """Passes prepared text or bytes through; anything else (an error) is written as JSON."""

    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None):
        if isinstance(data, bytes | str):
            return data
        return json.dumps(data)


class CsvRenderer(_FileRenderer):
    media_type = "text/csv"
    format = "csv"


class FocusCsvRenderer(_FileRenderer):
    media_type = "text/csv"
    format = "focus"


class XlsxRenderer(_FileRenderer):
    media_type = reports.XLSX_TYPE
    format = "xlsx"
    charset = None
    render_style = "binary"


def visible_team(*, user, slug: str) -> Team:
    """A team by slug: 400 when it does not exist, 404 when the user may not see it."""
    team = Team.objects.filter(slug=slug).first()
    if team is None:
        raise ValidationError({"team": [f"Unknown team {slug!r}."]})
    if not selectors.billing_team_list(user=user).filter(pk=team.pk).exists():
        raise NotFound("No such team.")
    return team


class UsageView(APIView):
    """GPU-hours allocated, used and idle, and cost, per GPU model for a team and period."""

    @extend_schema(parameters=[UsageQuerySerializer], responses=OpenApiTypes.OBJECT)
    def get(self, request):
        query = UsageQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        data = query.validated_data
        team = visible_team(user=request.user, slug=data["team"])
        return Response(reports.usage_summary(team=team, start=data["start"], end=data["end"]))


def report_for(*, user, month_text: str, team_slug: str | None = None) -> dict:
    month = parse_month(month_text)
    if month is None:
        raise ValidationError({"month": ["Use YYYY-MM, e.g. 2026-10."]})
    if team_slug:
        team = visible_team(user=user, slug=team_slug)
        return reports.team_report(team=team, month=month)
    return reports.scoped_report(
        month=month,
        teams=list(selectors.billing_team_list(user=user)),
        everything=selectors.billing_sees_all(user=user),
    )


class ReportView(APIView):
    """A month's report: JSON by default; ?format=csv, xlsx or focus (FOCUS CSV)."""

    renderer_classes = [
        JSONRenderer, BrowsableAPIRenderer, CsvRenderer, XlsxRenderer, FocusCsvRenderer,
    ]  # fmt: skip

    @extend_schema(
        parameters=[
            OpenApiParameter("month", str, OpenApiParameter.PATH, description="YYYY-MM"),
            OpenApiParameter("team", str, description="One team's slug (optional)"),
            OpenApiParameter("format", str, enum=["json", "csv", "xlsx", "focus"]),
        ],
        responses=OpenApiTypes.OBJECT,
    )
    def get(self, request, month):
        report = report_for(
            user=request.user, month_text=month, team_slug=request.query_params.get("team")
        )
        fmt = request.accepted_renderer.format
        if fmt in reports.EXPORTS:
            filename = reports.export_filename(month=month, fmt=fmt)
            return Response(
                reports.EXPORTS[fmt][1](report),
                headers={"Content-Disposition": f'attachment; filename="{filename}"'},
            )
        return Response(report)


class ReportCloseView(APIView):
    """Close a month (finance/admins) or, with action=reopen, reopen it (admins)."""

    @extend_schema(request=None, responses=OpenApiTypes.OBJECT)
    def post(self, request, month, action):
        parsed = parse_month(month)
        if parsed is None:
            raise ValidationError({"month": ["Use YYYY-MM, e.g. 2026-10."]})
        try:
            if action == "close":
                report = services.report_close(actor=request.user, month=parsed)
            else:
                report = services.report_reopen(
                    actor=request.user, month=parsed, reason=request.data.get("reason", "")
                )
        except PermissionError as exc:
            raise PermissionDenied(str(exc)) from exc
        return Response(
            {
                "month": month,
                "state": report.state,
                "price_book_version": report.price_book_version,
            },
            status=status.HTTP_200_OK,
        )


class GpuPriceViewSet(mixins.ListModelMixin, mixins.CreateModelMixin, viewsets.GenericViewSet):
    """The price book with its history; finance and admins add prices."""

    serializer_class = GpuPriceSerializer
    permission_classes = [FinanceWritesOthersRead]
    filterset_fields = ["mig_profile", "currency"]

    def get_queryset(self):
        return selectors.price_list(user=self.request.user)

    def perform_create(self, serializer):
        data = serializer.validated_data
        try:
            serializer.instance = services.gpu_price_create(actor=self.request.user, **data)
        except PermissionError as exc:
            raise PermissionDenied(str(exc)) from exc


class BudgetViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    """Budgets of the teams the caller sees; finance and admins set them (POST upserts)."""

    serializer_class = BudgetSerializer
    permission_classes = [FinanceWritesOthersRead]

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return Budget.objects.none()
        return selectors.budget_list(user=self.request.user)

    @extend_schema(request=BudgetInputSerializer, responses=BudgetSerializer)
    def create(self, request):
        data_in = BudgetInputSerializer(data=request.data)
        data_in.is_valid(raise_exception=True)
        data = dict(data_in.validated_data)
        team = visible_team(user=request.user, slug=data.pop("team"))
        try:
            budget = services.budget_set(actor=request.user, team=team, **data)
        except PermissionError as exc:
            raise PermissionDenied(str(exc)) from exc
        return Response(BudgetSerializer(budget).data, status=status.HTTP_201_CREATED)
