"""Energy and carbon settings: the site's PUE, a constant grid carbon intensity, and an hourly
intensity series a platform admin uploads. Used to estimate facility energy and CO2e from the
GPU energy DCGM measures (billing.energy)."""

from decimal import Decimal

from django.conf import settings
from django.db import models
from django.db.models import Q

# A modern data centre's power usage effectiveness (facility energy / IT energy). The site's
# own figure replaces it on the energy settings page.
DEFAULT_PUE = Decimal("1.20")


class EnergySettings(models.Model):
    """The site's one row (pk 1): PUE and the constant carbon intensity used for hours that the
    uploaded series does not cover. No constant: those hours have no CO2e estimate."""

    pue = models.DecimalField(max_digits=4, decimal_places=2, default=DEFAULT_PUE)
    grams_per_kwh = models.DecimalField(max_digits=7, decimal_places=1, null=True, blank=True)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "energy settings"
        constraints = [
            models.CheckConstraint(
                condition=Q(pue__gte=1) & Q(pue__lte=5), name="energysettings_pue_range"
            ),
            models.CheckConstraint(
                condition=Q(grams_per_kwh__isnull=True) | Q(grams_per_kwh__gte=0),
                name="energysettings_intensity_not_negative",
            ),
        ]

    def __str__(self):
        return f"PUE {self.pue}, {self.grams_per_kwh or 'no'} gCO2e/kWh"

    @classmethod
    def current(cls) -> "EnergySettings":
        """The site's settings (defaults until an admin saves them; nothing is written)."""
        return cls.objects.filter(pk=1).first() or cls(pk=1)


class CarbonIntensityHour(models.Model):
    """The grid's carbon intensity in one hour [hour, hour + 1 h), UTC, as uploaded."""

    hour = models.DateTimeField(unique=True)
    grams_per_kwh = models.FloatField()
    uploaded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    uploaded_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["hour"]
        constraints = [
            models.CheckConstraint(
                condition=Q(grams_per_kwh__gte=0), name="carbonintensity_not_negative"
            ),
        ]

    def __str__(self):
        return f"{self.hour:%Y-%m-%d %H:00} {self.grams_per_kwh} gCO2e/kWh"
