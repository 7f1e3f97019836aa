"""The energy settings page's forms: the site's PUE and constant carbon intensity, and the
hourly carbon intensity series upload."""

from django import forms

MAX_UPLOAD_BYTES = 4 * 1024 * 1024


class EnergySettingsForm(forms.Form):
    pue = forms.DecimalField(
        max_digits=4, decimal_places=2, min_value=1, max_value=5, label="PUE",
        help_text="Power usage effectiveness: the facility's energy over the IT equipment's "
        "(1.20 until set). Facility energy is estimated as GPU energy × PUE.",
    )  # fmt: skip
    grams_per_kwh = forms.DecimalField(
        max_digits=7, decimal_places=1, min_value=0, required=False,
        label="Grid carbon intensity (gCO2e/kWh)",
        help_text="Used for every hour the uploaded series does not cover. Empty: such hours "
        "get no CO2e estimate.",
    )  # fmt: skip


class CarbonSeriesForm(forms.Form):
    file = forms.FileField(
        label="Carbon intensity series (CSV)",
        help_text="One line per hour: hour start (ISO 8601, UTC unless it has an offset), "
        "gCO2e/kWh. A header line is allowed. Hours already uploaded are replaced.",
    )

    def clean_file(self):
        upload = self.cleaned_data["file"]
        if upload.size > MAX_UPLOAD_BYTES:
            raise forms.ValidationError("The file is larger than 4 MB: upload it in parts.")
        return upload
