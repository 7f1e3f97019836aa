"""Web forms for quota governance: filing a request, deciding one, editing tiers."""

from django import forms

from fleet.models import NodePool
from queues.models import PriorityTier, Team
from queues.models.quotas import PROTECTION_MAX_MINUTES
from queues.services.quotas import UNSET


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
    # A limit left empty keeps the team's current value: a request changes only what it names.
    borrowing_limit = forms.IntegerField(
        required=False,
        min_value=0,
        help_text="How many more GPUs your team may borrow from your department when they are "
        "idle. Empty: keep the team's current limit.",
    )
    no_borrowing_limit = forms.BooleanField(
        required=False,
        label="No borrowing limit",
        help_text="Ask to borrow as many idle GPUs as the department has.",
    )
    lending_limit = forms.IntegerField(
        required=False,
        min_value=0,
        help_text="How many of your idle GPUs other teams may borrow. Empty: keep the team's "
        "current limit.",
    )
    no_lending_limit = forms.BooleanField(
        required=False,
        label="No lending limit",
        help_text="Ask to lend all of your idle GPUs.",
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

    def clean(self):
        data = super().clean()
        for limit in ("borrowing_limit", "lending_limit"):
            if data.get(f"no_{limit}") and data.get(limit) is not None:
                self.add_error(limit, "Give a limit or tick “no limit”, not both.")
        return data

    def submission(self) -> dict:
        """The cleaned values as quota_request_create takes them: a limit left empty is not
        named (UNSET, the team keeps its value); "no limit" is None."""
        data = dict(self.cleaned_data)
        for limit in ("borrowing_limit", "lending_limit"):
            unlimited = data.pop(f"no_{limit}")
            if unlimited:
                data[limit] = None
            elif data[limit] is None:
                data[limit] = UNSET
        return data


class DecisionForm(forms.Form):
    nominal_gpus = forms.IntegerField(label="Grant nominal GPUs")
    borrowing_limit = forms.IntegerField(required=False, help_text="Empty: no limit.")
    lending_limit = forms.IntegerField(required=False, help_text="Empty: no limit.")
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}),
        required=False,
        help_text="Required when rejecting; the team reads it.",
    )

    def __init__(self, *args, quota_request, **kwargs):
        super().__init__(*args, **kwargs)
        # Only what the request names is the decision's to grant or trim.
        if not quota_request.sets_borrowing_limit:
            del self.fields["borrowing_limit"]
        if not quota_request.sets_lending_limit:
            del self.fields["lending_limit"]

    def decision(self) -> dict:
        """The numbers as quota_request_approve takes them (limits not named: left out)."""
        names = ("nominal_gpus", "borrowing_limit", "lending_limit")
        return {name: self.cleaned_data[name] for name in names if name in self.fields}


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

    protection_minutes = forms.IntegerField(
        required=False,
        label="Guaranteed runtime (minutes)",
        min_value=0,
        max_value=PROTECTION_MAX_MINUTES,
        initial=0,
        help_text="How long a running job of this tier is protected from preemption before "
        "other teams may reclaim the GPUs it borrows (0: not protected). Past it, the jobs "
        "that saved a checkpoint most recently are preempted first.",
    )

    IDLE_FIELDS = (
        "idle_threshold_percent", "idle_after_minutes", "idle_grace_minutes", "idle_action",
        "protection_minutes",
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
