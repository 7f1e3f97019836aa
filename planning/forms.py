"""Forms of planning's pages: the quota auto-approval rule (the what-if page reads its proposal
from the request itself, planning.views.whatif)."""

from django import forms


class AutoApprovalForm(forms.Form):
    enabled = forms.BooleanField(required=False, label="Approve increases on evidence")
    min_usage_percent = forms.IntegerField(
        min_value=1, max_value=100, label="When p90 use reaches (% of current quota)"
    )
    max_increase_gpus = forms.IntegerField(min_value=1, max_value=10000, label="Up to (GPUs more)")
    max_increase_percent = forms.IntegerField(
        min_value=1, max_value=1000, label="and up to (% more)"
    )
    lookback_days = forms.IntegerField(min_value=1, max_value=365, label="Measured over (days)")
