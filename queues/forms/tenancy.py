"""Web forms for people and tenancy."""

from django import forms


class ApiTokenForm(forms.Form):
    name = forms.CharField(
        max_length=100,
        label="Token name",
        help_text="What the token is for, e.g. 'training scripts on my laptop'.",
        widget=forms.TextInput(attrs={"placeholder": "training scripts"}),
    )
