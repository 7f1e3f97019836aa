"""API-wide glue: the exception handler that turns service errors into 400s with messages."""

from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import exceptions
from rest_framework.views import exception_handler as drf_exception_handler


def exception_handler(exc, context):
    """Render service-level ValidationErrors as DRF field errors instead of a 500."""
    if isinstance(exc, DjangoValidationError):
        if hasattr(exc, "error_dict"):
            detail = {
                field: [e.message % (e.params or {}) for e in errs]
                for field, errs in exc.error_dict.items()
            }
            detail = {("non_field_errors" if k == "__all__" else k): v for k, v in detail.items()}
        else:
            detail = {"non_field_errors": exc.messages}
        exc = exceptions.ValidationError(detail=detail)
    return drf_exception_handler(exc, context)
