"""The form that adds a GPU price to the price book."""

from django import forms

from fleet.models import GpuModel


class GpuPriceForm(forms.Form):
    gpu_model = forms.ModelChoiceField(queryset=GpuModel.objects.all(), label="GPU model")
    mig_profile = forms.CharField(
        max_length=32,
        required=False,
        label="MIG profile",
        help_text="Empty for whole GPUs; a MIG profile (1g.10gb), or time-slice 1/<replicas> "
        "for one slice of a time-sliced GPU.",
    )
    price_per_hour = forms.DecimalField(
        max_digits=12, decimal_places=4, min_value=0, label="Price per GPU-hour"
    )
    currency = forms.RegexField(regex=r"^[A-Za-z]{3}$", initial="EUR", max_length=3)
    effective_from = forms.DateTimeField(
        label="In force from (UTC)",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
        help_text="An open-ended price in force then ends at this moment.",
    )
    effective_to = forms.DateTimeField(
        required=False,
        label="Until (UTC, exclusive)",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )
    note = forms.CharField(max_length=200, required=False)
