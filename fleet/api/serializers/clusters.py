"""API serializers for clusters."""

from rest_framework import serializers

from fleet.models import Cluster
from fleet.validators import DNS1123_LABEL_MESSAGE, DNS1123_LABEL_RE


class ClusterSerializer(serializers.ModelSerializer):
    name = serializers.RegexField(
        DNS1123_LABEL_RE, max_length=63, error_messages={"invalid": DNS1123_LABEL_MESSAGE}
    )
    node_count = serializers.IntegerField(read_only=True, default=0)
    pool_count = serializers.IntegerField(read_only=True, default=0)

    class Meta:
        model = Cluster
        fields = [
            "id",
            "name",
            "kubeconfig_path",
            "context",
            "in_cluster",
            "scheduler",
            "kueue_api_version",
            "is_default",
            "dcgm_scrape_urls",
            "prometheus_url",
            "last_sync_at",
            "last_sync_error",
            "enabled",
            "disabled_reason",
            "last_contact_at",
            "api_latency_ms",
            "unreachable_since",
            "retry_at",
            "last_error",
            "last_error_at",
            "node_count",
            "pool_count",
            "created_at",
        ]
        # Enabling and disabling have their own actions (with a reason); health is observed.
        read_only_fields = [
            "id", "last_sync_at", "last_sync_error", "created_at", "enabled", "disabled_reason",
            "last_contact_at", "api_latency_ms", "unreachable_since", "retry_at", "last_error",
            "last_error_at",
        ]  # fmt: skip
        # Uniqueness and the connection rule are checked by the service, with better messages.
        validators = []
        extra_kwargs = {"name": {"validators": []}, "is_default": {"validators": []}}


class ClusterDisableSerializer(serializers.Serializer):
    """Why a platform admin disables or enables a cluster (kept in the audit log; when disabling,
    shown to the people whose jobs wait)."""

    reason = serializers.CharField(max_length=500)
