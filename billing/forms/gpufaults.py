"""The form a platform admin returns a node to service with."""

from django import forms


class ReturnToServiceForm(forms.Form):
    reason = forms.CharField(
        max_length=2000, widget=forms.Textarea(attrs={"rows": 2}),
        label="Why the node can run jobs again",
        help_text="Kept in the audit log, e.g. “GPU 3 reseated, burn-in passed”.",
    )  # fmt: skip
