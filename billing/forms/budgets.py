"""The form that sets a team's monthly budget."""

from django import forms

from billing.models import Budget
from queues.models import Team


class BudgetForm(forms.Form):
    team = forms.ModelChoiceField(queryset=Team.objects.none(), to_field_name="slug")
    month = forms.DateField(
        widget=forms.DateInput(attrs={"type": "month"}, format="%Y-%m"),
        input_formats=["%Y-%m", "%Y-%m-%d"],
        help_text="The budget covers this calendar month.",
    )
    kind = forms.ChoiceField(choices=Budget.Kind.choices)
    amount = forms.DecimalField(max_digits=14, decimal_places=2, min_value=0)
    currency = forms.RegexField(regex=r"^[A-Za-z]{3}$", initial="EUR", max_length=3)
    thresholds = forms.CharField(
        initial="50, 80, 100", help_text="Alert at these percentages, comma-separated."
    )
    enforce = forms.BooleanField(
        required=False, help_text="Hold the team's queue when the budget is spent."
    )

    def __init__(self, *args, teams=None, **kwargs):
        super().__init__(*args, **kwargs)
        if teams is not None:
            self.fields["team"].queryset = teams

    def clean_thresholds(self):
        raw = self.cleaned_data["thresholds"]
        try:
            values = sorted(
                {int(part) for part in raw.replace(";", ",").split(",") if part.strip()}
            )
        except ValueError as exc:
            raise forms.ValidationError("Use whole numbers, e.g. 50, 80, 100.") from exc
        if not values or any(v < 1 or v > 1000 for v in values):
            raise forms.ValidationError("Each threshold is between 1 and 1000 %.")
        return values
