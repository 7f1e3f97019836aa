"""A real OpenID Connect provider for the tests (django-oidc-provider), run as its own server
on this machine: `python -m tests.oidc_provider serve` (see tests/oidc_provider/__main__.py).
The demo's provider (demo/sso_provider) with the tests' port, database, people and claims."""

import os
from pathlib import Path

from demo.sso_provider.settings import *  # noqa: F403 - the demo's provider, renamed below
from demo.sso_provider.settings import TEMPLATES

HERE = Path(__file__).resolve().parent
PORT = int(os.environ.get("OIDC_TEST_PORT", "8765"))
SITE_URL = f"http://127.0.0.1:{PORT}"
SECRET_KEY = "test-oidc-provider-only"
ROOT_URLCONF = "tests.oidc_provider.urls"
TEMPLATES = [
    {
        **TEMPLATES[0],
        "DIRS": [HERE / "templates"],
        "OPTIONS": {
            "context_processors": [
                *TEMPLATES[0]["OPTIONS"]["context_processors"],
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("OIDC_TEST_DB", str(HERE / "provider.sqlite3")),
    }
}
SESSION_COOKIE_NAME = "provider_sessionid"
CSRF_COOKIE_NAME = "provider_csrftoken"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
OIDC_USERINFO = "tests.oidc_provider.claims.userinfo"
OIDC_EXTRA_SCOPE_CLAIMS = "tests.oidc_provider.claims.GroupsScopeClaims"
