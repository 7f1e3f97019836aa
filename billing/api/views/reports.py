"""API view of a month's report: JSON, or a file (CSV, Excel, FOCUS CSV)."""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.renderers import BrowsableAPIRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from billing.api.lookups import month_or_400, visible_team
from billing.api.renderers import CsvRenderer, FocusCsvRenderer, XlsxRenderer
from billing.exports import EXPORTS, export_filename
from billing.selectors.reports import team_report, user_report
from core.renderers import JSONRenderer


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
        parsed = month_or_400(month)
        slug = request.query_params.get("team")
        if slug:
            report = team_report(team=visible_team(user=request.user, slug=slug), month=parsed)
        else:
            report = user_report(user=request.user, month=parsed)
        fmt = request.accepted_renderer.format
        if fmt in EXPORTS:
            filename = export_filename(month=month, fmt=fmt)
            return Response(
                EXPORTS[fmt][1](report),
                headers={"Content-Disposition": f'attachment; filename="{filename}"'},
            )
        return Response(report)
