"""DRF authentication with the portal's named API tokens (`Authorization: Bearer qm_…`)."""

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
        return token.user, token

    def authenticate_header(self, request):
        return 'Bearer realm="api"'
