"""API serializers for quota governance: requests, quotas, tiers, audit events."""

from rest_framework import serializers

from fleet.models import NodePool
from queues.api.serializers.tenancy import VisibleTeamField
from queues.models import AuditEvent, PriorityTier, Quota, QuotaRequest
from queues.selectors.environment import env_hidden, env_readable, env_readers
from queues.selectors.quotas import quota_requests_apply_waits


class QuotaRequestSerializer(serializers.ModelSerializer):
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    pool_name = serializers.CharField(source="pool.name", read_only=True)
    requested_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    decided_by = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )
    apply_wait = serializers.SerializerMethodField(
        help_text="While an approved request is not in the cluster yet: what holds it back (the "
        "cluster disabled or not answering, the message broker down, what the cluster said at "
        "the last try); empty otherwise."
    )

    def get_apply_wait(self, quota_request) -> str:
        # Read once for the whole page (one query for the queue objects, one for the broker's
        # kept messages), whichever request asks first.
        waits = self.context.get("apply_waits")
        if waits is None:
            page = getattr(self.parent, "instance", None) if self.parent is not None else None
            waits = quota_requests_apply_waits(list(page) if page is not None else [quota_request])
            self.context["apply_waits"] = waits
        if quota_request.pk not in waits and quota_request.state == "approved":
            waits.update(quota_requests_apply_waits([quota_request]))
        return waits.get(quota_request.pk, "")

    class Meta:
        model = QuotaRequest
        fields = [
            "id",
            "team",
            "pool",
            "pool_name",
            "requested_by",
            "nominal_gpus",
            "borrowing_limit",
            "lending_limit",
            "sets_borrowing_limit",
            "sets_lending_limit",
            "ends_at",
            "justification",
            "state",
            "granted_nominal_gpus",
            "granted_borrowing_limit",
            "granted_lending_limit",
            "decided_by",
            "decided_at",
            "decision_reason",
            "apply_error",
            "apply_wait",
            "applied_at",
            "created_at",
        ]
        read_only_fields = fields


class QuotaRequestCreateSerializer(serializers.Serializer):
    team = VisibleTeamField()
    pool = serializers.PrimaryKeyRelatedField(
        queryset=NodePool.objects.filter(cluster__deleted_at__isnull=True)
    )
    nominal_gpus = serializers.IntegerField()
    # Left out: the team keeps its limit; null: no limit.
    borrowing_limit = serializers.IntegerField(
        required=False, allow_null=True,
        help_text="Left out: the team keeps its current limit; null: no limit.",
    )  # fmt: skip
    lending_limit = serializers.IntegerField(
        required=False, allow_null=True,
        help_text="Left out: the team keeps its current limit; null: no limit.",
    )  # fmt: skip
    ends_at = serializers.DateTimeField(required=False, allow_null=True)
    justification = serializers.CharField(required=False, allow_blank=True, default="")


class QuotaRequestApproveSerializer(serializers.Serializer):
    nominal_gpus = serializers.IntegerField(required=False)
    borrowing_limit = serializers.IntegerField(required=False, allow_null=True)
    lending_limit = serializers.IntegerField(required=False, allow_null=True)
    reason = serializers.CharField(required=False, allow_blank=True, default="")


class QuotaRequestRejectSerializer(serializers.Serializer):
    reason = serializers.CharField(allow_blank=True)


class QuotaSerializer(serializers.ModelSerializer):
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    pool_name = serializers.CharField(source="pool.name", read_only=True)
    cluster = serializers.CharField(source="pool.cluster.name", read_only=True)

    class Meta:
        model = Quota
        fields = [
            "id",
            "team",
            "pool",
            "pool_name",
            "cluster",
            "nominal_gpus",
            "borrowing_limit",
            "lending_limit",
            "ends_at",
            "base_nominal_gpus",
            "base_borrowing_limit",
            "base_lending_limit",
            "updated_at",
        ]
        read_only_fields = fields


class PriorityTierSerializer(serializers.ModelSerializer):
    class Meta:
        model = PriorityTier
        fields = [
            "id", "name", "value", "preemptible", "is_default", "description",
            "idle_threshold_percent", "idle_after_minutes", "idle_grace_minutes", "idle_action",
            "protection_minutes",
        ]  # fmt: skip
        read_only_fields = ["id"]
        # Uniqueness and the one-default rule are the service's business (it moves the default).
        validators = []
        extra_kwargs = {"name": {"validators": []}}


class AuditEventSerializer(serializers.ModelSerializer):
    actor = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)
    # Null for what belongs to no team or department (a cluster, a token, a price).
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)
    department = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)

    class Meta:
        model = AuditEvent
        fields = [
            "id",
            "created_at",
            "actor",
            "verb",
            "object_type",
            "object_id",
            "object_repr",
            "team",
            "department",
            "before",
            "after",
            "manifest_diff",
            "message",
        ]
        read_only_fields = fields

    def to_representation(self, event):
        """Environment values in what the event recorded (a template's spec, a sweep's grid)
        are for the event's team and platform admins, as on jobs."""
        data = super().to_representation(event)
        context = self.context
        if "env_readers" not in context:
            request = context.get("request")
            context["env_readers"] = env_readers(user=getattr(request, "user", None))
        if not env_readable(context["env_readers"], event.team_id):
            data["before"], data["after"] = env_hidden(data["before"]), env_hidden(data["after"])
        return data
