"""API serializers for advance reservations."""

from rest_framework import serializers

from fleet.models import NodePool
from queues.api.serializers.tenancy import VisibleTeamField
from queues.models import Reservation, ReservationSettings
from queues.selectors.reservations import reservation_price


class ReservationSerializer(serializers.ModelSerializer):
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    pool_name = serializers.CharField(source="pool.name", read_only=True)
    requested_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    decided_by = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )

    class Meta:
        model = Reservation
        fields = [
            "id", "team", "pool", "pool_name", "gpus", "starts_at", "ends_at", "reason",
            "state", "requested_by", "decided_by", "decided_at", "decision_reason",
            "holding_since", "activated_at", "finished_at", "created_at",
        ]  # fmt: skip
        read_only_fields = fields


class ReservationDetailSerializer(ReservationSerializer):
    price = serializers.SerializerMethodField(
        help_text="The held capacity priced by the team's billing policy: amount, currency, "
        "GPU-hours held, basis and how it was priced; null when the price book has no price."
    )

    def get_price(self, reservation) -> dict | None:
        price = reservation_price(reservation=reservation)
        if price is None:
            return None
        return {**price, "amount": str(price["amount"]), "gpu_hours": str(price["gpu_hours"])}

    class Meta(ReservationSerializer.Meta):
        fields = [*ReservationSerializer.Meta.fields, "price"]
        read_only_fields = fields


class ReservationCreateSerializer(serializers.Serializer):
    team = VisibleTeamField()
    pool = serializers.PrimaryKeyRelatedField(
        queryset=NodePool.objects.filter(cluster__deleted_at__isnull=True)
    )
    gpus = serializers.IntegerField(min_value=1, max_value=100_000)
    starts_at = serializers.DateTimeField()
    ends_at = serializers.DateTimeField()
    reason = serializers.CharField(allow_blank=True, max_length=2000)


class ReservationRejectSerializer(serializers.Serializer):
    reason = serializers.CharField(allow_blank=True, max_length=2000)


class ReservationApproveSerializer(serializers.Serializer):
    reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=2000)


class ReservationSettingsSerializer(serializers.ModelSerializer):
    # Null until an admin first saves the settings (the defaults apply).
    updated_at = serializers.DateTimeField(read_only=True, allow_null=True)

    class Meta:
        model = ReservationSettings
        fields = ["lead_minutes", "updated_at"]
        read_only_fields = ["updated_at"]
        extra_kwargs = {"lead_minutes": {"required": True}}
