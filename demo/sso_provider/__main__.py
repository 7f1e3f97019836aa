"""Set up and run the demo provider: `python -m demo.sso_provider setup <portal URL>` (its
database, signing key, the portal as its client, the demo identities), then
`python -m demo.sso_provider serve` (on OIDC_DEMO_PORT). `scripts/serve oidc` does both."""

import os
import sys

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "demo.sso_provider.settings")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402

from demo.sso_provider.people import (  # noqa: E402
    CLIENT_ID,
    CLIENT_SECRET,
    PASSWORD,
    PEOPLE,
)


def setup(portal: str) -> None:
    from django.conf import settings
    from django.contrib.auth.models import Group, User
    from oidc_provider.models import Client, ResponseType, RSAKey

    os.makedirs(os.path.dirname(os.path.abspath(settings.DATABASES["default"]["NAME"])),
                exist_ok=True)  # fmt: skip
    call_command("migrate", verbosity=0, interactive=False)
    if not RSAKey.objects.exists():
        call_command("creatersakey", verbosity=0)
    portal = portal.rstrip("/")
    client, _ = Client.objects.update_or_create(
        client_id=CLIENT_ID,
        defaults={"name": "Quartermaster (demo)", "client_type": "confidential",
                  "client_secret": CLIENT_SECRET, "jwt_alg": "RS256",
                  "require_consent": False, "reuse_consent": True,
                  "_redirect_uris": f"{portal}/oidc/callback/",
                  "_post_logout_redirect_uris": f"{portal}/accounts/login/",
                  "_scope": "openid email profile groups"},
    )  # fmt: skip
    client.response_types.set([ResponseType.objects.get(value="code")])
    for username, (first, last, groups, _) in PEOPLE.items():
        user, _ = User.objects.get_or_create(username=username)
        user.first_name, user.last_name = first, last
        user.email = f"{username}@idp.example.org"
        user.set_password(PASSWORD)
        user.save()
        user.groups.set([Group.objects.get_or_create(name=g)[0] for g in groups])


def serve() -> None:
    from django.conf import settings

    call_command("runserver", f"127.0.0.1:{settings.PORT}", use_reloader=False,
                 use_threading=True)  # fmt: skip


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "setup":
        setup(sys.argv[2])
    elif sys.argv[1:] == ["serve"]:
        serve()
    else:
        sys.exit("usage: python -m demo.sso_provider setup <portal URL> | serve")
