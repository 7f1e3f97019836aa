"""API view of one job's measured use."""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.exceptions import NotFound
from rest_framework.response import Response
from rest_framework.views import APIView

from billing.selectors.jobs import job_usage
from queues.models import Job
from queues.selectors.jobs import job_get


class JobUsageView(APIView):
    """A job's GPU utilisation and memory per hour, GPU-hours held and used, cost so far (with
    the prices used, on the team's basis), queue wait, and whether it holds GPUs it barely uses."""

    @extend_schema(responses=OpenApiTypes.OBJECT)
    def get(self, request, pk):
        try:
            job = job_get(user=request.user, pk=pk)
        except Job.DoesNotExist as exc:
            raise NotFound("No such job that you can see.") from exc
        return Response(job_usage(job=job))
