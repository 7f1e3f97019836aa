"""The one way a service's ValidationError reaches a form: on its fields, else on the form."""

from django import forms
from django.core.exceptions import ValidationError


def add_service_errors(form: forms.Form, exc: ValidationError) -> None:
    """Put a service's ValidationError on the form's fields (or the form when not a field)."""
    if hasattr(exc, "error_dict"):
        for field, errors in exc.message_dict.items():
            for message in errors:
                form.add_error(field if field in form.fields else None, message)
    else:
        for message in exc.messages:
            form.add_error(None, message)
