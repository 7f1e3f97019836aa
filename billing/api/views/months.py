"""API view of month close: close a month (finance, admins) or reopen it (admins)."""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from billing.api.lookups import month_or_400
from billing.services.months import report_close, report_reopen


class ReportCloseView(APIView):
    """Close a month (finance/admins) or, with action=reopen, reopen it (admins)."""

    @extend_schema(request=None, responses=OpenApiTypes.OBJECT)
    def post(self, request, month, action):
        parsed = month_or_400(month)
        if action == "close":
            report = report_close(actor=request.user, month=parsed)
        else:
            reason = request.data.get("reason", "")
            report = report_reopen(actor=request.user, month=parsed, reason=reason)
        return Response(
            {
                "month": month,
                "state": report.state,
                "price_book_version": report.price_book_version,
            },
            status=status.HTTP_200_OK,
        )
