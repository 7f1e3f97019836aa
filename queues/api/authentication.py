"""DRF authentication with the portal's named API tokens (`Authorization: Bearer qm_…`)."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from queues.services.tenancy import api_token_authenticate


class ApiTokenAuthentication(authentication.BaseAuthentication):
    """Accepts `Authorization: Bearer <token>` or `Authorization: Token <token>`."""

    keywords = ("bearer", "token")

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].decode(errors="replace").lower() not in self.keywords:
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed(
                "Invalid Authorization header: use 'Bearer <token>'."
            )
        token = api_token_authenticate(raw=header[1].decode(errors="replace"))
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid or revoked API token.")
        if token.is_expired:
            raise exceptions.AuthenticationFailed(
                f"This API token expired on {token.expires_at:%Y-%m-%d %H:%M} UTC; create a new "
                "one on your profile page or at /api/v1/auth/token/."
            )
        return token.user, token

    def authenticate_header(self, request):
        return 'Bearer realm="api"'


class ApiTokenScheme(OpenApiAuthenticationExtension):
    """How the API schema describes the token (drf-spectacular finds it by target class)."""

    target_class = ApiTokenAuthentication
    name = "ApiToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A named API token (qm_…): POST /api/v1/auth/token/ or the profile "
            "page; send it as `Authorization: Bearer <token>`.",
        }
