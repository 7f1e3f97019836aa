"""REST API for jobs: submit, list, detail, cancel, resubmit, approve, reject; approval policy."""

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import HttpResponse
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import ClusterUnavailable
from core.permissions import IsPlatformAdminOrReadOnly
from core.text import ascii_digits
from fleet import kube
from queues.api.serializers.jobs import (
    ApprovalPolicySerializer,
    JobDetailSerializer,
    JobSerializer,
    JobSubmitSerializer,
    JobTemplateCreateSerializer,
    JobTemplateSerializer,
    RejectSerializer,
    SweepSerializer,
    SweepSubmitSerializer,
)
from queues.api.serializers.protection import (
    CheckpointReportSerializer,
    CheckpointSerializer,
    ProtectionSerializer,
)
from queues.api.views.log_follow import follow_response
from queues.filters import JobFilter
from queues.models import Job, JobTemplate, Sweep
from queues.selectors import jobs as job_selectors
from queues.selectors.protection import job_protection
from queues.services import protection
from queues.services.jobs import idle, lifecycle, sweeps
from queues.services.jobs import logs as job_logs
from queues.services.jobs import submit as job_services
from queues.services.jobs import templates as job_templates
from queues.services.jobs.submit import POLICY_LIMITS


class JobViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Jobs of the teams the caller may see; members submit, owners and leads cancel."""

    filterset_class = JobFilter
    ordering_fields = ["created_at", "state", "queue_position"]

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # schema generation has no user
            return Job.objects.none()
        qs = job_selectors.job_list(user=self.request.user)
        if self.action == "retrieve":
            qs = qs.prefetch_related("pods", "transitions")
        return qs

    def get_serializer_class(self):
        return JobDetailSerializer if self.action == "retrieve" else JobSerializer

    def _detail(self, job, code=status.HTTP_200_OK):
        job = self.get_queryset().prefetch_related("pods", "transitions").get(pk=job.pk)
        return Response(JobDetailSerializer(job, context={"request": self.request}).data, code)

    @extend_schema(
        request=JobSubmitSerializer,
        responses={201: JobDetailSerializer, 200: JobDetailSerializer},
        parameters=[
            OpenApiParameter(
                "Idempotency-Key", str, OpenApiParameter.HEADER,
                description="Any string up to 200 characters. Sending the same key again "
                "returns the job the first request made (200, Idempotent-Replayed: true) "
                "instead of submitting a second one, so a script can safely retry.",
            )
        ],
    )  # fmt: skip
    def create(self, request):
        key = request.headers.get("Idempotency-Key", "")
        if len(key) > 200 or not key.isprintable():
            raise ValidationError({"Idempotency-Key": ["Use at most 200 printable characters."]})
        data = JobSubmitSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = dict(data.validated_data)
        team = job_selectors.job_team_for(user=request.user, slug=values.pop("team", ""))
        job = job_services.job_submit(user=request.user, team=team, idempotency_key=key, **values)
        if getattr(job, "replayed", False):
            answer = self._detail(job)
            answer["Idempotent-Replayed"] = "true"
            return answer
        # A new job has no pods yet; answering from the row in hand keeps submission cheap. Its
        # submitter is in its team, so reads its environment.
        context = {"request": request, "env_readers": (frozenset({team.pk}), False)}
        data = JobSerializer(job, context=context).data
        return Response({**data, "pods": []}, status.HTTP_201_CREATED)

    @extend_schema(
        parameters=[
            OpenApiParameter("pod", str, description="A pod of the job (default: its first)."),
            OpenApiParameter("tail", int, description="Last lines only (default 500)."),
            OpenApiParameter(
                "follow",
                bool,
                description="Stream new lines as they come, until the pod ends (at most "
                "LOG_FOLLOW_MAX_SECONDS). 429 with Retry-After when the caller, or the portal, "
                "has as many follows open as it may.",
            ),
        ],
        responses={(200, "text/plain"): OpenApiTypes.STR, 429: OpenApiTypes.OBJECT},
    )
    @action(detail=True, methods=["get"])
    def logs(self, request, pk=None):
        """A pod's log (text/plain): from the cluster while the pod runs, then the part kept
        when it ended. Read by the job's team and platform admins."""
        job = self.get_object()
        tail = request.query_params.get("tail", "500")
        if not ascii_digits(tail):
            raise ValidationError({"tail": ["Give a number of lines, e.g. 200."]})
        pod = request.query_params.get("pod", "")
        if request.query_params.get("follow", "").lower() in ("1", "true", "yes"):
            return follow_response(request, job, pod=pod, tail=int(tail))
        try:
            text = job_logs.job_log(user=request.user, job=job, pod=pod, tail=int(tail))
        except DjangoPermissionDenied as exc:
            raise PermissionDenied(str(exc)) from exc
        response = HttpResponse(text, content_type="text/plain; charset=utf-8")
        if request.query_params.get("download"):
            response["Content-Disposition"] = f'attachment; filename="job-{job.pk}.log"'
        return response

    @extend_schema(request=None, responses=JobDetailSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        job = lifecycle.job_cancel(job=self.get_object(), user=request.user)
        return self._detail(job)

    @extend_schema(request=None, responses=JobDetailSerializer)
    @action(detail=True, methods=["post"])
    def resume(self, request, pk=None):
        """Resume a job the idle-GPU policy suspended (its owner, a team lead, an admin)."""
        try:
            job = idle.job_idle_resume(job=self.get_object(), user=request.user)
        except kube.KubeError as exc:
            raise ClusterUnavailable(f"The cluster did not take the resume: {exc}") from exc
        return self._detail(job)

    @extend_schema(request=None, responses={201: JobDetailSerializer})
    @action(detail=True, methods=["post"])
    def resubmit(self, request, pk=None):
        job = job_services.job_resubmit(job=self.get_object(), user=request.user)
        return self._detail(job, status.HTTP_201_CREATED)

    @extend_schema(request=None, responses=JobDetailSerializer)
    @action(detail=True, methods=["post"])
    def approve(self, request, pk=None):
        job = job_services.job_approve(job=self.get_object(), approver=request.user)
        return self._detail(job)

    @extend_schema(
        methods=["POST"], request=CheckpointReportSerializer, responses={201: CheckpointSerializer}
    )
    @extend_schema(methods=["GET"], request=None, responses=CheckpointSerializer(many=True))
    @action(detail=True, methods=["get", "post"])
    def checkpoints(self, request, pk=None):
        """A running job reports a checkpoint (its owner, a team lead, an admin: e.g. with the
        owner's API token in the pod); everyone who sees the job reads them, newest first."""
        job = self.get_object()
        if request.method == "GET":
            rows = job.checkpoints.select_related("reported_by").order_by("-at", "-id")[:100]
            return Response(CheckpointSerializer(rows, many=True).data)
        data = CheckpointReportSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            checkpoint = protection.checkpoint_report(
                job=job, actor=request.user, **data.validated_data
            )
        except DjangoPermissionDenied as exc:
            raise PermissionDenied(str(exc)) from exc
        return Response(CheckpointSerializer(checkpoint).data, status.HTTP_201_CREATED)

    @extend_schema(request=None, responses=ProtectionSerializer)
    @action(detail=True, methods=["get"])
    def protection(self, request, pk=None):
        """Until when the job's run is protected from preemption, its latest checkpoint, and
        why its latest preemption chose it."""
        job = self.get_object()
        return Response(ProtectionSerializer(job_protection(job=job, now=timezone.now())).data)

    @extend_schema(request=RejectSerializer, responses=JobDetailSerializer)
    @action(detail=True, methods=["post"])
    def reject(self, request, pk=None):
        data = RejectSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        reason = data.validated_data.get("reason", "")
        job = job_services.job_reject(job=self.get_object(), approver=request.user, reason=reason)
        return self._detail(job)


class ApprovalPolicyView(APIView):
    """The job approval policy: everyone reads it, platform admins change it."""

    permission_classes = [IsPlatformAdminOrReadOnly]
    admin_writes = "the approval policy"
    serializer_class = ApprovalPolicySerializer

    def get(self, request):
        return Response(ApprovalPolicySerializer(job_services.approval_policy_get()).data)

    def _update(self, request, *, partial: bool):
        data = ApprovalPolicySerializer(data=request.data, partial=partial)
        data.is_valid(raise_exception=True)
        changes = dict(data.validated_data)
        if not partial:  # a PUT states the whole policy: what it leaves out is switched off
            changes = {"tiers_needing_approval": [], "allowed_registries": [],
                       **dict.fromkeys(POLICY_LIMITS), **changes}  # fmt: skip
        if "tiers_needing_approval" in changes:
            changes["tiers"] = changes.pop("tiers_needing_approval")
        policy = job_services.approval_policy_update(actor=request.user, **changes)
        return Response(ApprovalPolicySerializer(policy).data)

    def put(self, request):
        return self._update(request, partial=False)

    def patch(self, request):
        """Change only the fields given."""
        return self._update(request, partial=True)


# What a template keeps: a submission's fields (job_validate's arguments).
SPEC_FIELDS = (
    "name", "image", "command", "args", "env", "workers", "gpus_per_worker", "pool", "tier",
    "gang", "max_runtime_seconds", "expected_runtime_seconds", "retry_limit", "cpu", "memory",
    "shm_size", "volumes", "secret_env", "topology_level", "topology_mode", "kind",
    "driver_command", "interruptible", "checkpoint_volume", "checkpoint_path",
)  # fmt: skip


class JobTemplateViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):  # fmt: skip
    """Job templates of the teams you can see; members save them (from a job or a spec), and
    whoever saved one, a lead of its team or a platform admin deletes it."""

    serializer_class = JobTemplateSerializer

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return JobTemplate.objects.none()
        return job_selectors.job_templates_visible(user=self.request.user)

    @extend_schema(request=JobTemplateCreateSerializer, responses={201: JobTemplateSerializer})
    def create(self, request):
        body = JobTemplateCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        if data["from_job"] is not None:
            try:
                job = job_selectors.job_get(user=request.user, pk=data["from_job"])
            except Job.DoesNotExist as exc:  # a field of the body, like `team`: a 400
                raise ValidationError(
                    {"from_job": [f"No job #{data['from_job']} that you can see."]}
                ) from exc
            template = job_templates.job_template_from_job(
                actor=request.user, job=job, name=data["name"]
            )
        else:
            if not isinstance(data["spec"], dict):
                raise ValidationError({"spec": ["Give the job's fields as an object."]})
            team = job_selectors.job_team_for(user=request.user, slug=data["team"])
            spec = {k: v for k, v in data["spec"].items() if k in SPEC_FIELDS}
            template = job_templates.job_template_save(
                actor=request.user, team=team, name=data["name"], spec=spec
            )
        data = JobTemplateSerializer(template, context=self.get_serializer_context()).data
        return Response(data, status.HTTP_201_CREATED)

    def perform_destroy(self, instance):
        job_templates.job_template_delete(actor=self.request.user, template=instance)


class SweepViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Sweeps: one submission over a grid of parameters (one job per combination, all or
    none), listed with their jobs' states, runtimes and costs, and cancelled together."""

    serializer_class = SweepSerializer

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return Sweep.objects.none()
        return job_selectors.sweep_list(user=self.request.user)

    @extend_schema(request=SweepSubmitSerializer, responses={201: SweepSerializer})
    def create(self, request):
        body = SweepSubmitSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        values = dict(body.validated_data)
        grid = values.pop("grid")
        team = job_selectors.job_team_for(user=request.user, slug=values.pop("team", ""))
        sweep = sweeps.sweep_submit(
            user=request.user, team=team, name=values["name"], spec=values, grid=grid
        )
        data = SweepSerializer(sweep, context=self.get_serializer_context()).data
        return Response(data, status.HTTP_201_CREATED)

    @extend_schema(
        request=None,
        responses={
            200: inline_serializer("SweepCancelled", {"cancelled": serializers.IntegerField()})
        },
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        """Cancel every job of the sweep that has not ended."""
        return Response(
            {"cancelled": sweeps.sweep_cancel(user=request.user, sweep=self.get_object())}
        )
