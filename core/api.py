"""API-wide glue: the exception handler and the paginator every endpoint uses."""

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import DataError
from rest_framework import exceptions
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.views import exception_handler as drf_exception_handler

from core.errors import ClusterRefused, IdempotencyKeyReused
from core.renderers import JSONRenderer


def exception_handler(exc, context):
    """Every API error as JSON a person can act on: service ValidationErrors as field errors,
    an oversized body as 413, a body nested too deep to parse as 400; and always rendered as
    JSON, whatever format the request asked for (a CSV or XLSX renderer cannot show an error)."""
    if isinstance(exc, RequestDataTooBig):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        exc = TooLarge(f"The request body is larger than the {limit} bytes allowed.")
    elif isinstance(exc, RecursionError):
        exc = exceptions.ParseError("The JSON body is nested too deeply to read.")
    elif isinstance(exc, DataError) and "NUL" in str(exc):
        # A NUL character in a lookup (a slug, a name): PostgreSQL text cannot hold one, and
        # the database refused before anything was written.
        exc = exceptions.ParseError("Text may not contain NUL (0x00) characters.")
    elif isinstance(exc, ClusterRefused):
        exc = ClusterUnavailable(str(exc))
    elif isinstance(exc, IdempotencyKeyReused):
        exc = Unprocessable(str(exc))
    elif isinstance(exc, DjangoValidationError):
        if hasattr(exc, "error_dict"):
            detail = {
                # Without params the message is as written: a '%' in it (often the input it
                # quotes) is no format directive.
                field: [e.message % e.params if e.params else e.message for e in errs]
                for field, errs in exc.error_dict.items()
            }
            detail = {("non_field_errors" if k == "__all__" else k): v for k, v in detail.items()}
        else:
            detail = {"non_field_errors": exc.messages}
        exc = exceptions.ValidationError(detail=detail)
    response = drf_exception_handler(exc, context)
    request = context.get("request")
    if response is not None and request is not None:
        request.accepted_renderer, request.accepted_media_type = JSONRenderer(), "application/json"
    return response


class ClusterUnavailable(exceptions.APIException):
    """A write the cluster did not take (unreachable, disabled, refused): nothing was saved."""

    status_code = 503
    default_detail = "The cluster did not take the change; nothing was saved."
    default_code = "cluster_unavailable"


class Unprocessable(exceptions.APIException):
    status_code = 422
    default_detail = "The request cannot be carried out as sent."
    default_code = "unprocessable"


class TooLarge(exceptions.APIException):
    status_code = 413
    default_detail = "The request body is too large."
    default_code = "request_too_large"


class Pagination(LimitOffsetPagination):
    """limit/offset pages, 50 rows by default and 1,000 at most; a limit or offset beyond what
    any table holds is read as the largest one (an empty page), never passed to the database."""

    default_limit = 50
    max_limit = 1000
    max_offset = 2**53

    def get_offset(self, request):
        return min(super().get_offset(request), self.max_offset)
