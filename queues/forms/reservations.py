"""Web forms for advance reservations: requesting one, deciding one, the lead time."""

from django import forms

from fleet.models import NodePool
from queues.models import Team

WHEN = {
    "widget": forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
    "input_formats": ["%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M:%S"],
}


class ReservationForm(forms.Form):
    team = forms.ModelChoiceField(queryset=Team.objects.none(), empty_label=None)
    pool = forms.ModelChoiceField(
        queryset=NodePool.objects.filter(cluster__deleted_at__isnull=True)
        .select_related("gpu_model", "cluster")
        .order_by("name"),
        empty_label="Choose…",
    )
    gpus = forms.IntegerField(label="GPUs", help_text="How many GPUs of the pool to hold.")
    starts_at = forms.DateTimeField(label="Starts (UTC)", **WHEN)
    ends_at = forms.DateTimeField(label="Ends (UTC)", **WHEN)
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), max_length=2000)

    def __init__(self, *args, teams, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["team"].queryset = teams


class ReservationDecisionForm(forms.Form):
    reason = forms.CharField(
        required=False,
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Required to reject; the team reads it.",
    )


class ReservationSettingsForm(forms.Form):
    lead_minutes = forms.IntegerField(
        label="Lead time (minutes)",
        min_value=0,
        max_value=10080,
        help_text="How long before a window opens the team's GPUs in the pool stop being lent, "
        "so borrowers finish before the start instead of being preempted at it.",
    )
