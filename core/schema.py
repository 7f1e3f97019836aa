"""The OpenAPI schema: who may read it, and the statuses every operation documents."""

from django.conf import settings
from drf_spectacular.openapi import AutoSchema
from rest_framework.permissions import AllowAny, BasePermission


class SchemaPermission(BasePermission):
    """The API schema is for signed-in users, unless API_SCHEMA_PUBLIC is set."""

    message = "Sign in to read the API schema."

    def has_permission(self, request, view):
        return settings.API_SCHEMA_PUBLIC or bool(request.user and request.user.is_authenticated)


ERROR_BODY = {
    "type": "object",
    "description": "`detail` says what went wrong; a 400 names each field it refuses instead, "
    "with its messages, or for a list or map field the same shape per item (by index or key).",
    "properties": {"detail": {"type": "string"}},
    "additionalProperties": {
        "anyOf": [
            {"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "object"}]}},
            {"type": "object"},
        ]
    },
}
ERRORS = {
    "400": "The request cannot be done as sent; the body says what to fix.",
    "401": "Not signed in (send a session cookie or `Authorization: Bearer <token>`).",
    "403": "Signed in, but not allowed to do this; the body says who may.",
    "404": "No such object that you can see.",
    "413": "The request body is too large.",
    "429": "Too many requests or failed sign-ins; the Retry-After header says when to retry.",
}


class PortalAutoSchema(AutoSchema):
    """The schema documents every status an operation can answer, not only its success: 400
    for a malformed request, 401 and 403 where a permission is checked, 404 where the path
    names an object, 413 where a body is read, 429 where requests are throttled or counted."""

    def _get_response_bodies(self, direction="response"):
        responses = super()._get_response_bodies(direction=direction)
        if direction != "response":
            return responses
        public = all(isinstance(p, AllowAny) for p in self.view.get_permissions())
        codes = set()
        if not public:
            codes |= {"401", "403"}
        if "{" in self.path or getattr(self.view, "names_objects_in_query", False):
            codes.add("404")
        codes.add("400")  # any request can be malformed: a bad query, path or body
        if self.method in ("POST", "PUT", "PATCH"):
            codes.add("413")
        if self.view.get_throttles() or public:
            codes.add("429")
        for code in sorted(codes - set(responses)):
            responses[code] = {
                "description": ERRORS[code],
                "content": {"application/json": {"schema": ERROR_BODY}},
            }
        return responses
