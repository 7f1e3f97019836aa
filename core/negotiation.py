"""Content negotiation for the API (its own module: DRF imports it while reading its settings,
before core.api could finish importing)."""

from django.http import Http404
from rest_framework.negotiation import DefaultContentNegotiation


class Negotiation(DefaultContentNegotiation):
    """DRF's negotiation, except that a ?format= the endpoint does not offer is answered in
    JSON instead of with a 404 before authentication and permissions are checked: a caller who
    may not see or change something is told so (401/403/404) whatever format it asked for, and
    one who may gets JSON, which says what it is in its Content-Type."""

    def select_renderer(self, request, renderers, format_suffix=None):
        try:
            return super().select_renderer(request, renderers, format_suffix)
        except Http404:
            return renderers[0], renderers[0].media_type
