"""Settings of the demo's OpenID Connect provider (a Django project of its own; see
demo/sso_provider/__init__.py). Its database is OIDC_DEMO_DB, its port OIDC_DEMO_PORT."""

import os
from pathlib import Path

HERE = Path(__file__).resolve().parent
PORT = int(os.environ.get("OIDC_DEMO_PORT", "8090"))
SECRET_KEY = "demo-identity-provider-only"  # demo data: the provider holds nothing of value
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "oidc_provider",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "demo.sso_provider.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [HERE / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
            ]
        },
    }
]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("OIDC_DEMO_DB", "var/oidc/provider.sqlite3"),
    }
}
# The portal runs on another port of the same host, and cookies do not tell ports apart: the
# provider's own cookie names keep its session apart from the portal's.
SESSION_COOKIE_NAME = "demo_idp_sessionid"
CSRF_COOKIE_NAME = "demo_idp_csrftoken"
LOGIN_URL = "/accounts/login/"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
OIDC_USERINFO = "demo.sso_provider.claims.userinfo"
OIDC_EXTRA_SCOPE_CLAIMS = "demo.sso_provider.claims.GroupsScopeClaims"
