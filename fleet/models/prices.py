"""The price book: the price of a GPU-hour per model (and MIG profile) over half-open periods."""

from django.conf import settings
from django.contrib.postgres.constraints import ExclusionConstraint
from django.contrib.postgres.fields import DateTimeRangeField, RangeOperators
from django.db import models
from django.utils.deconstruct import deconstructible

from fleet.models.inventory import GpuModel


@deconstructible(path="fleet.models.TsTzRange")  # the path the migrations name
class TsTzRange(models.Func):
    """tstzrange(lower, upper, bounds): the half-open period of a price row (PostgreSQL)."""

    function = "TSTZRANGE"
    output_field = DateTimeRangeField()


class PostgresExclusionConstraint(ExclusionConstraint):
    """An exclusion constraint created on PostgreSQL only; other databases skip it.

    SQLite (the embedded default) has no GiST; there the price-book services check overlaps
    (fleet.selectors.prices.price_overlaps) before every write instead.
    """

    def deconstruct(self):
        # The path the migrations name (the class moved into fleet/models/prices.py).
        _path, args, kwargs = super().deconstruct()
        return "fleet.models.PostgresExclusionConstraint", args, kwargs

    def constraint_sql(self, model, schema_editor):
        if schema_editor.connection.vendor != "postgresql":
            return None
        # Tables built straight from the models (tests with --nomigrations) get no
        # BtreeGistExtension operation, and the equality parts need btree_gist.
        schema_editor.execute("CREATE EXTENSION IF NOT EXISTS btree_gist")
        return super().constraint_sql(model, schema_editor)

    def create_sql(self, model, schema_editor):
        if schema_editor.connection.vendor != "postgresql":
            return None
        return super().create_sql(model, schema_editor)

    def remove_sql(self, model, schema_editor):
        if schema_editor.connection.vendor != "postgresql":
            return None
        return super().remove_sql(model, schema_editor)

    def validate(self, model, instance, exclude=None, using="default"):
        from django.db import connections

        if connections[using].vendor != "postgresql":
            return
        super().validate(model, instance, exclude=exclude, using=using)


class GpuPrice(models.Model):
    """The price of one GPU-hour of a model (and MIG profile) over a half-open period."""

    gpu_model = models.ForeignKey(GpuModel, on_delete=models.PROTECT, related_name="prices")
    mig_profile = models.CharField(max_length=32, blank=True)
    price_per_hour = models.DecimalField(max_digits=12, decimal_places=4)
    currency = models.CharField(max_length=3, default="EUR")
    effective_from = models.DateTimeField()
    effective_to = models.DateTimeField(null=True, blank=True)
    note = models.CharField(max_length=200, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["gpu_model__name", "mig_profile", "effective_from"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(price_per_hour__gte=0), name="gpuprice_non_negative"
            ),
            models.CheckConstraint(
                condition=models.Q(effective_to__isnull=True)
                | models.Q(effective_to__gt=models.F("effective_from")),
                name="gpuprice_period_valid",
            ),
            # Needs the btree_gist extension for the equality parts (BtreeGistExtension()).
            PostgresExclusionConstraint(
                name="gpuprice_no_overlap",
                expressions=[
                    ("gpu_model", RangeOperators.EQUAL),
                    ("mig_profile", RangeOperators.EQUAL),
                    (
                        TsTzRange(
                            "effective_from",
                            "effective_to",
                            models.Value("[)"),
                        ),
                        RangeOperators.OVERLAPS,
                    ),
                ],
                violation_error_message="Another price for this GPU model and MIG profile "
                "is in force during part of this period.",
            ),
        ]

    def __str__(self):
        return f"{self.gpu_model} {self.price_per_hour} {self.currency}/h"
