"""API of the borrowing and lending ledger (a month's lines per team, and the rate) and of
idle GPU-hours."""

from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from billing.api.lookups import month_or_400
from billing.api.serializers.ledger import LedgerRateInputSerializer, LedgerRateSerializer
from billing.permissions import FinanceWritesOthersRead
from billing.selectors.idle import idle_report
from billing.selectors.ledger import rate_history, user_ledger
from billing.selectors.reports import billing_team_ids
from billing.services.ledger import ledger_rate_set


class LedgerView(APIView):
    """GPU-hours each team the caller may see borrowed from its cohort and lent to it in a
    month, with the charge and credit at the borrowing rate (frozen once the month is closed)."""

    @extend_schema(
        parameters=[OpenApiParameter("month", str, description="YYYY-MM (default: this month)")],
        responses=OpenApiTypes.OBJECT,
    )
    def get(self, request):
        month = month_or_400(request.query_params.get("month") or f"{timezone.now():%Y-%m}")
        return Response(user_ledger(user=request.user, month=month))


class IdleView(APIView):
    """Idle GPU-hours of a month (hours a job's GPUs stayed below its tier's idle threshold)
    and their cost, per team and per user the caller may see; and the jobs idle now."""

    @extend_schema(
        parameters=[OpenApiParameter("month", str, description="YYYY-MM (default: this month)")],
        responses=OpenApiTypes.OBJECT,
    )
    def get(self, request):
        month = month_or_400(request.query_params.get("month") or f"{timezone.now():%Y-%m}")
        return Response(idle_report(month=month, team_ids=billing_team_ids(user=request.user)))


class LedgerRateView(APIView):
    """The borrowing rate (everyone signed in reads it); finance and admins set a new one,
    in force from now on."""

    permission_classes = [FinanceWritesOthersRead]

    @extend_schema(responses=LedgerRateSerializer(many=True))
    def get(self, request):
        return Response(LedgerRateSerializer(rate_history(), many=True).data)

    @extend_schema(request=LedgerRateInputSerializer, responses={201: LedgerRateSerializer})
    def post(self, request):
        data = LedgerRateInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        rate = ledger_rate_set(actor=request.user, **data.validated_data)
        return Response(LedgerRateSerializer(rate).data, status=status.HTTP_201_CREATED)
