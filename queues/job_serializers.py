"""API serializers for jobs: a loose input shape (the service validates), a full output shape."""

from rest_framework import serializers

from queues.models import ApprovalPolicy, Job, JobPod, JobTransition, PriorityTier


class JobSubmitSerializer(serializers.Serializer):
    """What POST /api/v1/jobs/ accepts; types are checked here, meaning in job_submit."""

    team = serializers.CharField(required=False, allow_blank=True, max_length=63)
    name = serializers.CharField(max_length=200)
    image = serializers.CharField(max_length=500)
    command = serializers.JSONField()
    args = serializers.JSONField(required=False, default=list)
    env = serializers.JSONField(required=False, default=dict)
    workers = serializers.IntegerField(required=False, default=1)
    gpus_per_worker = serializers.IntegerField(required=False, default=1)
    pool = serializers.CharField(required=False, allow_blank=True, allow_null=True, default=None)
    tier = serializers.CharField(required=False, allow_blank=True, allow_null=True, default=None)
    gang = serializers.BooleanField(required=False, default=True)
    max_runtime_seconds = serializers.IntegerField()
    expected_runtime_seconds = serializers.IntegerField(required=False, allow_null=True)


class JobPodSerializer(serializers.ModelSerializer):
    class Meta:
        model = JobPod
        fields = [
            "name", "namespace", "node_name", "gpus", "gpu_uuids", "phase", "exit_code",
            "started_at", "finished_at",
        ]  # fmt: skip


class JobTransitionSerializer(serializers.ModelSerializer):
    class Meta:
        model = JobTransition
        fields = ["from_state", "to_state", "at", "reason"]


class JobSerializer(serializers.ModelSerializer):
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    owner = serializers.SlugRelatedField(slug_field="username", read_only=True)
    pool = serializers.SlugRelatedField(slug_field="name", read_only=True)
    admitted_pool = serializers.SlugRelatedField(slug_field="name", read_only=True)
    tier = serializers.SlugRelatedField(slug_field="name", read_only=True)
    url = serializers.HyperlinkedIdentityField(view_name="api-job-detail")

    class Meta:
        model = Job
        fields = [
            "id", "url", "name", "team", "owner", "state", "image", "command", "args", "env",
            "workers", "gpus_per_worker", "pool", "tier", "gang", "max_runtime_seconds",
            "expected_runtime_seconds", "k8s_name", "admitted_pool", "pending_reason",
            "queue_position", "estimated_start", "estimate_basis", "preemption_reason",
            "exit_reason", "apply_error", "resubmitted_from", "created_at", "submitted_at",
            "queued_at", "admitted_at", "started_at", "finished_at",
        ]  # fmt: skip
        read_only_fields = fields


class JobDetailSerializer(JobSerializer):
    pods = JobPodSerializer(many=True, read_only=True)
    transitions = JobTransitionSerializer(many=True, read_only=True)

    class Meta(JobSerializer.Meta):
        fields = [*JobSerializer.Meta.fields, "pods", "transitions"]
        read_only_fields = fields


class RejectSerializer(serializers.Serializer):
    reason = serializers.CharField(required=False, allow_blank=True, max_length=2000)


class ApprovalPolicySerializer(serializers.ModelSerializer):
    tiers_needing_approval = serializers.SlugRelatedField(
        slug_field="name", many=True, queryset=PriorityTier.objects.all(), required=False
    )
    max_gpus_without_approval = serializers.IntegerField(
        min_value=0, allow_null=True, required=False
    )
    max_runtime_seconds_without_approval = serializers.IntegerField(
        min_value=1, allow_null=True, required=False
    )

    class Meta:
        model = ApprovalPolicy
        fields = [
            "tiers_needing_approval",
            "max_gpus_without_approval",
            "max_runtime_seconds_without_approval",
            "updated_at",
        ]
        read_only_fields = ["updated_at"]
