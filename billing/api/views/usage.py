"""API view of usage: GPU-hours and cost per GPU model for a team and period."""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from billing.api.lookups import visible_team
from billing.api.serializers.usage import UsageQuerySerializer
from billing.selectors.reports import usage_summary


class UsageView(APIView):
    """GPU-hours allocated, used and idle, and cost, per GPU model for a team and period."""

    names_objects_in_query = True  # ?team=: one the caller cannot see answers 404

    @extend_schema(parameters=[UsageQuerySerializer], responses=OpenApiTypes.OBJECT)
    def get(self, request):
        query = UsageQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        data = query.validated_data
        team = visible_team(user=request.user, slug=data["team"])
        return Response(usage_summary(team=team, start=data["start"], end=data["end"]))
