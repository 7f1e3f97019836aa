"""API shapes for the borrowing rate: a rate as listed, and the input that sets one."""

from rest_framework import serializers

from billing.models import LedgerRate


class LedgerRateSerializer(serializers.ModelSerializer):
    created_by = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )

    class Meta:
        model = LedgerRate
        fields = ["rate_per_gpu_hour", "currency", "effective_from", "note", "created_by"]


class LedgerRateInputSerializer(serializers.Serializer):
    rate_per_gpu_hour = serializers.DecimalField(max_digits=12, decimal_places=4, min_value=0)
    note = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
