"""Forms of the team's volumes-and-secrets page."""

from django import forms

from fleet.models import Cluster
from queues.forms.jobs import parse_env
from queues.models import TeamSecret, TeamVolume


def _cluster_field(form: forms.Form) -> None:
    clusters = Cluster.objects.filter(deleted_at__isnull=True).order_by("name")
    form.fields["cluster"].queryset = clusters
    if clusters.count() <= 1:
        # One cluster: nothing to choose.
        form.fields["cluster"].widget = forms.HiddenInput()
        form.fields["cluster"].initial = clusters.first()


class VolumeForm(forms.Form):
    cluster = forms.ModelChoiceField(queryset=Cluster.objects.none(), empty_label=None,
                                     to_field_name="name")  # fmt: skip
    name = forms.CharField(max_length=63, help_text="e.g. datasets; jobs mount it by this name.")
    size_gib = forms.IntegerField(min_value=1, label="Size (GiB)")
    storage_class = forms.CharField(
        required=False, max_length=253, label="Storage class",
        help_text="Empty: the cluster's default class.",
    )  # fmt: skip
    access_mode = forms.ChoiceField(
        choices=TeamVolume.AccessMode.choices, initial=TeamVolume.AccessMode.RWX,
        help_text="Many nodes at once (ReadWriteMany) for multi-worker jobs.",
    )  # fmt: skip

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _cluster_field(self)


class VolumeResizeForm(forms.Form):
    size_gib = forms.IntegerField(min_value=1, label="New size (GiB)")


class SecretForm(forms.Form):
    cluster = forms.ModelChoiceField(queryset=Cluster.objects.none(), empty_label=None,
                                     to_field_name="name")  # fmt: skip
    name = forms.CharField(max_length=63, help_text="e.g. wandb; the same name replaces it.")
    kind = forms.ChoiceField(choices=TeamSecret.Kind.choices, initial="generic")
    values = forms.CharField(
        required=False, max_length=1024 * 1024, label="Values",
        widget=forms.Textarea(attrs={"rows": 3, "autocomplete": "off", "spellcheck": "false"}),
        help_text="One key=value per line (for values). They go to the cluster and are never "
        "shown again.",
    )  # fmt: skip
    registry = forms.CharField(required=False, max_length=253,
                               help_text="For an image pull secret: e.g. ghcr.io.")  # fmt: skip
    username = forms.CharField(required=False, max_length=253)
    password = forms.CharField(
        required=False, max_length=4096, label="Password or token",
        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}),
    )  # fmt: skip

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _cluster_field(self)

    def clean_values(self):
        try:
            return parse_env(self.cleaned_data.get("values", ""))
        except forms.ValidationError as exc:
            raise forms.ValidationError(
                "Write one key=value per line." if hasattr(exc, "error_dict") else exc.messages
            ) from exc
