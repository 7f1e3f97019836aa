"""Web forms for quota governance: filing a request, deciding one, editing tiers."""

from django import forms

from fleet.models import NodePool
from queues.models import PriorityTier, Team


class QuotaRequestForm(forms.Form):
    team = forms.ModelChoiceField(queryset=Team.objects.none(), empty_label=None)
    pool = forms.ModelChoiceField(
        queryset=NodePool.objects.filter(cluster__deleted_at__isnull=True).select_related(
            "gpu_model", "cluster"
        ),
        empty_label="Choose…",
    )
    nominal_gpus = forms.IntegerField(
        label="Nominal GPUs", help_text="The GPUs your team can always use in this pool."
    )
    borrowing_limit = forms.IntegerField(
        required=False,
        help_text="How many more GPUs you may borrow from your department when idle. "
        "Empty: no limit.",
    )
    lending_limit = forms.IntegerField(
        required=False,
        help_text="How many of your idle GPUs others may borrow. Empty: all of them.",
    )
    ends_at = forms.DateTimeField(
        label="Ends (burst grant)",
        required=False,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
        input_formats=["%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M", "%Y-%m-%d"],
        help_text="Optional, UTC. The quota reverts by itself at this time.",
    )
    justification = forms.CharField(widget=forms.Textarea(attrs={"rows": 4}), required=False)

    def __init__(self, *args, teams, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["team"].queryset = teams


class DecisionForm(forms.Form):
    nominal_gpus = forms.IntegerField(label="Grant nominal GPUs")
    borrowing_limit = forms.IntegerField(required=False, help_text="Empty: no limit.")
    lending_limit = forms.IntegerField(required=False, help_text="Empty: no limit.")
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}),
        required=False,
        help_text="Required when rejecting; the team reads it.",
    )


class TierForm(forms.Form):
    # A plain form: the service checks the model (and moves the default flag) in one place.
    name = forms.CharField(max_length=63, help_text="A DNS-1123 label, e.g. 'experiment-high'.")
    value = forms.IntegerField(help_text="Higher runs first and may preempt lower tiers.")
    preemptible = forms.BooleanField(
        required=False,
        initial=True,
        help_text="Off: jobs of this tier are never preempted by other tiers' jobs of their team "
        "(it must then have the highest value). GPUs a job borrows from other teams can "
        "always be reclaimed by their owners.",
    )
    is_default = forms.BooleanField(required=False, label="Default tier for new jobs")
    description = forms.CharField(max_length=200, required=False)
    idle_threshold_percent = forms.IntegerField(
        required=False,
        label="Idle below (% utilisation)",
        min_value=0,
        max_value=100,
        initial=5,
        help_text="A running job whose GPUs average less than this is idle.",
    )
    idle_after_minutes = forms.IntegerField(
        required=False,
        label="Idle for (minutes)",
        min_value=1,
        max_value=10080,
        initial=30,
        help_text="How long a job may stay idle before its owner and lead are warned.",
    )
    idle_grace_minutes = forms.IntegerField(
        required=False,
        label="Grace after the warning (minutes)",
        min_value=0,
        max_value=10080,
        initial=30,
    )
    idle_action = forms.ChoiceField(
        required=False,
        label="Then",
        choices=PriorityTier.IdleAction.choices,
        initial="warn",
        help_text="Suspend: the job's workload is deactivated in Kueue (its GPUs go back to "
        "the queue) until its owner resumes it.",
    )

    IDLE_FIELDS = (
        "idle_threshold_percent", "idle_after_minutes", "idle_grace_minutes", "idle_action",
    )  # fmt: skip

    def clean(self):
        data = super().clean()
        # Left empty (or not sent by an older page): the tier keeps its policy, a new one
        # gets the defaults.
        for name in self.IDLE_FIELDS:
            if data.get(name) in (None, ""):
                data[name] = self.initial.get(name, self.fields[name].initial)
        return data

    @classmethod
    def initial_for(cls, tier: PriorityTier) -> dict:
        return {name: getattr(tier, name) for name in cls.base_fields}
