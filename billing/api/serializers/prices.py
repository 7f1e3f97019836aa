"""API shapes for the price book."""

from rest_framework import serializers

from fleet.models import GpuModel, GpuPrice


class GpuPriceSerializer(serializers.ModelSerializer):
    gpu_model = serializers.SlugRelatedField(slug_field="name", queryset=GpuModel.objects.all())
    created_by = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )

    class Meta:
        model = GpuPrice
        fields = [
            "id", "gpu_model", "mig_profile", "price_per_hour", "currency", "effective_from",
            "effective_to", "note", "created_by", "created_at",
        ]  # fmt: skip
        read_only_fields = ["id", "created_by", "created_at"]
