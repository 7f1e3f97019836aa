"""The demo's OpenID Connect provider (`make run SSO=1`): a django-oidc-provider server of its
own, with demo identities whose groups OIDC_ROLE_MAP turns into the portal's roles. Demo data
only: a fixed client secret, passwords everyone knows. Not part of the portal (it is run as its
own process, `scripts/serve oidc`, with its own settings and database)."""
