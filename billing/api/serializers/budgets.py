"""API shapes for budgets: a budget as listed, and the input that sets one."""

from rest_framework import serializers

from billing.api.lookups import MONTH_HELP
from billing.models import Budget
from billing.periods import parse_month


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
            raise serializers.ValidationError(MONTH_HELP)
        return month
