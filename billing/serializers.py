"""API input and output shapes for billing."""

import re
from datetime import date

from rest_framework import serializers

from billing.models import Budget
from fleet.models import GpuModel, GpuPrice

MONTH_RE = re.compile(r"^(\d{4})-(0[1-9]|1[0-2])$")


def parse_month(value: str) -> date | None:
    match = MONTH_RE.match(value or "")
    if not match:
        return None
    return date(int(match.group(1)), int(match.group(2)), 1)


class UsageQuerySerializer(serializers.Serializer):
    team = serializers.SlugField(max_length=63)
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()

    def validate(self, attrs):
        if attrs["end"] <= attrs["start"]:
            raise serializers.ValidationError({"end": ["The end must be after the start."]})
        if (attrs["end"] - attrs["start"]).days > 400:
            raise serializers.ValidationError({"end": ["Ask for at most 400 days at a time."]})
        return attrs


class GpuPriceSerializer(serializers.ModelSerializer):
    gpu_model = serializers.SlugRelatedField(slug_field="name", queryset=GpuModel.objects.all())
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = GpuPrice
        fields = [
            "id", "gpu_model", "mig_profile", "price_per_hour", "currency", "effective_from",
            "effective_to", "note", "created_by", "created_at",
        ]  # fmt: skip
        read_only_fields = ["id", "created_by", "created_at"]


class BudgetSerializer(serializers.ModelSerializer):
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    month = serializers.SerializerMethodField()

    class Meta:
        model = Budget
        fields = [
            "id", "team", "month", "kind", "amount", "currency", "thresholds", "enforce",
            "alerts_sent", "held", "last_spent", "last_checked_at",
        ]  # fmt: skip

    def get_month(self, obj) -> str:
        return f"{obj.month:%Y-%m}"


class BudgetInputSerializer(serializers.Serializer):
    team = serializers.SlugField(max_length=63)
    month = serializers.CharField(max_length=7)
    kind = serializers.ChoiceField(choices=Budget.Kind.choices, default=Budget.Kind.CURRENCY)
    amount = serializers.DecimalField(max_digits=14, decimal_places=2, min_value=0)
    currency = serializers.RegexField(r"^[A-Za-z]{3}$", default="EUR")
    thresholds = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=1000),
        default=[50, 80, 100],
        max_length=10,
    )
    enforce = serializers.BooleanField(default=False)

    def validate_month(self, value):
        month = parse_month(value)
        if month is None:
            raise serializers.ValidationError("Use YYYY-MM, e.g. 2026-10.")
        return month
