"""The form finance uses to set the borrowing rate."""

from django import forms


class LedgerRateForm(forms.Form):
    rate_per_gpu_hour = forms.DecimalField(
        label="Rate per borrowed GPU-hour",
        max_digits=12,
        decimal_places=4,
        min_value=0,
        help_text="Charged to the borrower and credited to the lenders; 0 turns it off.",
    )
    note = forms.CharField(max_length=200, required=False)
