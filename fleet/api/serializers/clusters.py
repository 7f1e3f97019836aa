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
            "last_sync_at",
            "last_sync_error",
            "node_count",
            "pool_count",
            "created_at",
        ]
        read_only_fields = ["id", "last_sync_at", "last_sync_error", "created_at"]
        # Uniqueness and the connection rule are checked by the service, with better messages.
        validators = []
        extra_kwargs = {"name": {"validators": []}, "is_default": {"validators": []}}
