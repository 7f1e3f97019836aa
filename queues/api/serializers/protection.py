"""API serializers for preemption protection: checkpoints a job reports, and its protection."""

from rest_framework import serializers

from queues.models import JobCheckpoint


class CheckpointReportSerializer(serializers.Serializer):
    step = serializers.IntegerField(
        required=False, allow_null=True, min_value=0, help_text="The training step saved."
    )
    path = serializers.CharField(
        required=False, allow_blank=True, max_length=500,
        help_text="Where the checkpoint is (in the job's checkpoint volume).",
    )  # fmt: skip


class CheckpointSerializer(serializers.ModelSerializer):
    reported_by = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )

    class Meta:
        model = JobCheckpoint
        fields = ["id", "at", "step", "path", "source", "reported_by"]
        read_only_fields = fields


class PreemptionSerializer(serializers.Serializer):
    at = serializers.DateTimeField()
    checkpoint_at = serializers.DateTimeField(allow_null=True)
    lost_gpu_hours = serializers.FloatField()
    priority_class = serializers.CharField()
    why = serializers.CharField()


class ProtectionSerializer(serializers.Serializer):
    protection_minutes = serializers.IntegerField(
        help_text="The tier's guaranteed runtime before other teams may reclaim (0: none)."
    )
    protected = serializers.BooleanField()
    protected_until = serializers.DateTimeField(allow_null=True)
    priority_class = serializers.CharField(
        help_text="The WorkloadPriorityClass the job's object names now."
    )
    last_checkpoint_at = serializers.DateTimeField(allow_null=True)
    last_checkpoint_step = serializers.IntegerField(allow_null=True)
    preemption = PreemptionSerializer(allow_null=True, help_text="The latest preemption.")
