"""Set up and run the test provider: `python -m tests.oidc_provider setup <redirect uri>…`
(database, signing key, the portal as a client, the users of users.py with their groups), then
`python -m tests.oidc_provider serve` (a threaded server on OIDC_TEST_PORT)."""

import os
import sys

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.oidc_provider.settings")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402

from tests.oidc_provider.users import PASSWORD, USERS  # noqa: E402

CLIENT_ID = "quartermaster"
CLIENT_SECRET = "portal-client-secret"


def setup(redirect_uris: list[str]) -> None:
    from django.contrib.auth.models import Group, User
    from oidc_provider.models import Client, ResponseType

    call_command("migrate", verbosity=0, interactive=False)
    call_command("creatersakey", verbosity=0)
    portal = redirect_uris[0].split("/oidc/")[0]
    client, _ = Client.objects.update_or_create(
        client_id=CLIENT_ID,
        defaults={"name": "Quartermaster", "client_type": "confidential",
                  "client_secret": CLIENT_SECRET, "jwt_alg": "RS256",
                  "require_consent": False, "reuse_consent": True,
                  "_redirect_uris": "\n".join(redirect_uris),
                  "_post_logout_redirect_uris": f"{portal}/accounts/login/",
                  "_scope": "openid email profile groups"},
    )  # fmt: skip
    client.response_types.set([ResponseType.objects.get(value="code")])
    for username, (first, last, groups, email, _verified, _preferred) in USERS.items():
        user, _ = User.objects.get_or_create(username=username)
        user.first_name, user.last_name, user.email = first, last, email
        user.set_password(PASSWORD)
        user.save()
        user.groups.set([Group.objects.get_or_create(name=g)[0] for g in groups])


def serve() -> None:
    port = os.environ.get("OIDC_TEST_PORT", "8765")
    call_command("runserver", f"127.0.0.1:{port}", use_reloader=False, use_threading=True)


if __name__ == "__main__":
    if sys.argv[1] == "setup":
        setup(sys.argv[2:])
    else:
        serve()
