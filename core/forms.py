"""Forms, project-wide: the one way a service's ValidationError reaches a form (on its fields,
else on the form), and the check that no field keeps text no database or page can hold."""

from django import forms
from django.core.exceptions import ValidationError

from core.text import lone_surrogate_message, lone_surrogate_path


def add_service_errors(form: forms.Form, exc: ValidationError) -> None:
    """Put a service's ValidationError on the form's fields (or the form when not a field)."""
    if hasattr(exc, "error_dict"):
        for field, errors in exc.message_dict.items():
            for message in errors:
                form.add_error(field if field in form.fields else None, message)
    else:
        for message in exc.messages:
            form.add_error(None, message)


class RefusesLoneSurrogates:
    """A form mixin: a field whose value holds a lone UTF-16 surrogate (a field that reads JSON
    text, where "\\ud800" decodes to one) gets an error saying so, instead of a value no
    database or page can hold (core/text.py). Form posts themselves are UTF-8 and cannot."""

    def _clean_fields(self):
        super()._clean_fields()
        for name, value in list(self.cleaned_data.items()):
            path = lone_surrogate_path(value, name)
            if path is not None:
                self.add_error(name, lone_surrogate_message(path))


class SurrogateFreeModelForm(RefusesLoneSurrogates, forms.ModelForm):
    """The Django admin's form for models with JSON fields."""
