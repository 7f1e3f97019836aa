"""Single sign-on with OpenID Connect (mozilla-django-oidc), configured from the environment.

The provider's endpoints come from its discovery document (`OIDC_ISSUER` +
`/.well-known/openid-configuration`, read when a single sign-on needs it and kept an hour), so
the provider being down touches only the "Sign in with …" button and its callback. The account
a sign-in lands in is the one bound to the provider's (issuer, sub) (sso/identity.py); at every
sign-in the group claim is mapped to team memberships and roles (`OIDC_ROLE_MAP`), and what
changed is audited. The map is authoritative for what it names: a hand-made grant there is
undone at the next sign-in; a team, a department or a role the map never mentions keeps what
the portal's admins set by hand.
"""

from __future__ import annotations

import logging
import time
from urllib.parse import urlencode

import jwt
import requests
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.exceptions import ImproperlyConfigured, SuspiciousOperation
from django.db import transaction
from django.http import Http404
from django.shortcuts import redirect, resolve_url
from django.urls import path
from django.views import View
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.utils import import_from_settings
from mozilla_django_oidc.views import (
    OIDCAuthenticationCallbackView,
    OIDCAuthenticationRequestView,
    OIDCLogoutView,
)

from core.principal import principal_forget
from core.roles import GROUP_FINANCE, GROUP_MANAGERS, GROUP_PLATFORM_ADMINS
from sso.identity import identity_user

log = logging.getLogger(__name__)

DISCOVERY_TTL = 3600.0
# mozilla-django-oidc's endpoint settings, and where the discovery document names each.
DISCOVERED = {
    "OIDC_OP_AUTHORIZATION_ENDPOINT": "authorization_endpoint",
    "OIDC_OP_TOKEN_ENDPOINT": "token_endpoint",
    "OIDC_OP_USER_ENDPOINT": "userinfo_endpoint",
    "OIDC_OP_JWKS_ENDPOINT": "jwks_uri",
}
ROLE_GROUPS = {"finance": GROUP_FINANCE, "platform-admin": GROUP_PLATFORM_ADMINS}
_discovery: dict = {"at": 0.0, "document": {}, "issuer": None}


def discovery_document() -> dict:
    """The provider's discovery document ({} when it cannot be read now: asked again after a
    minute, so a provider that is down does not slow every sign-in)."""
    age = time.monotonic() - _discovery["at"]
    if _discovery["issuer"] == settings.OIDC_ISSUER and (
        age < DISCOVERY_TTL if _discovery["document"] else age < 60
    ):
        return _discovery["document"]
    url = settings.OIDC_ISSUER.rstrip("/") + "/.well-known/openid-configuration"
    try:
        response = requests.get(url, timeout=5)
        response.raise_for_status()
        document = response.json()
    except (requests.RequestException, ValueError) as exc:
        log.warning("OpenID Connect discovery at %s failed: %s", url, exc)
        document = {}
    _discovery.update(at=time.monotonic(), document=document, issuer=settings.OIDC_ISSUER)
    return document


def oidc_setting(attr, *default):
    """A mozilla-django-oidc setting; the provider's endpoints from discovery unless set."""
    if attr in DISCOVERED and not getattr(settings, attr, None):
        value = discovery_document().get(DISCOVERED[attr])
        if value:
            return value
        if default:
            return default[0]
    return import_from_settings(attr, *default)


def sso_enabled() -> bool:
    return bool(getattr(settings, "OIDC_ISSUER", ""))


def sso_context(request) -> dict:
    """For the login page and the navigation: whether single sign-on is on, its name, and
    whether local passwords still work."""
    return {
        "sso": {
            "enabled": sso_enabled(),
            "name": getattr(settings, "OIDC_PROVIDER_NAME", ""),
            "local_passwords": getattr(settings, "LOCAL_PASSWORDS", True),
        }
    }


class SignInView(OIDCAuthenticationRequestView):
    """The redirect to the provider's sign-in page (404 without single sign-on)."""

    get_settings = staticmethod(oidc_setting)

    def __init__(self, *args, **kwargs):
        View.__init__(self, *args, **kwargs)  # the endpoints are read per request, below

    def get(self, request):
        if not sso_enabled():
            raise Http404("Single sign-on is not configured.")
        self.OIDC_OP_AUTH_ENDPOINT = self.get_settings("OIDC_OP_AUTHORIZATION_ENDPOINT", "")
        self.OIDC_RP_CLIENT_ID = self.get_settings("OIDC_RP_CLIENT_ID")
        if not self.OIDC_OP_AUTH_ENDPOINT:
            messages.error(request, f"{settings.OIDC_PROVIDER_NAME} does not answer now; try "
                           "again in a moment.")  # fmt: skip
            return redirect("login")
        return super().get(request)


class CallbackView(OIDCAuthenticationCallbackView):
    """Where the provider sends the browser back; a failed sign-in says so on the login page."""

    get_settings = staticmethod(oidc_setting)

    def get(self, request):
        if not sso_enabled():
            raise Http404("Single sign-on is not configured.")
        return super().get(request)

    def login_failure(self):
        name = settings.OIDC_PROVIDER_NAME
        if getattr(self.request, "sso_unreachable", False):
            why = f"{name} does not answer now; try again in a moment"
        else:
            why = "try again, or ask an admin whether your account may use the portal"
        messages.error(self.request, f"Signing in with {name} did not complete: {why}.")
        return redirect("login")


class SignOutView(OIDCLogoutView):
    """Sign out here, then at the provider when it offers an end-session endpoint."""

    get_settings = staticmethod(oidc_setting)

    @property
    def redirect_url(self):
        # Only a user who signed in there (the session keeps the ID token) is sent to the
        # provider's end-session endpoint, with the token to say who leaves.
        id_token = self.request.session.get("oidc_id_token") if sso_enabled() else None
        end_session = discovery_document().get("end_session_endpoint") if id_token else ""
        if end_session:
            back = self.request.build_absolute_uri(resolve_url(settings.LOGOUT_REDIRECT_URL))
            query = urlencode({"id_token_hint": id_token, "post_logout_redirect_uri": back})
            return f"{end_session}?{query}"
        return resolve_url(settings.LOGOUT_REDIRECT_URL)


urlpatterns = [
    path("authenticate/", SignInView.as_view(), name="oidc_authentication_init"),
    path("callback/", CallbackView.as_view(), name="oidc_authentication_callback"),
    path("logout/", SignOutView.as_view(), name="oidc_logout"),
]


class _FromSettings:
    """A mozilla-django-oidc setting read when the backend uses it, not when it is built."""

    def __init__(self, name, *default):
        self.name, self.default = name, default

    def __get__(self, backend, owner=None):
        return self if backend is None else oidc_setting(self.name, *self.default)


class PortalOIDCBackend(OIDCAuthenticationBackend):
    """Sign-in through the provider's code flow: only from the portal's callback (after its
    state, nonce and PKCE checks), the account found by the provider's (issuer, sub)
    (sso/identity.py), and the group claim applied to memberships and roles at every sign-in.

    Django builds every backend for every sign-in, local passwords included, so nothing of the
    provider is read until a callback asks: a provider that is down cannot stop a local
    sign-in."""

    get_settings = staticmethod(oidc_setting)
    OIDC_OP_TOKEN_ENDPOINT = _FromSettings("OIDC_OP_TOKEN_ENDPOINT")
    OIDC_OP_USER_ENDPOINT = _FromSettings("OIDC_OP_USER_ENDPOINT")
    OIDC_OP_JWKS_ENDPOINT = _FromSettings("OIDC_OP_JWKS_ENDPOINT", None)
    OIDC_RP_CLIENT_ID = _FromSettings("OIDC_RP_CLIENT_ID")
    OIDC_RP_CLIENT_SECRET = _FromSettings("OIDC_RP_CLIENT_SECRET")
    OIDC_RP_SIGN_ALGO = _FromSettings("OIDC_RP_SIGN_ALGO", "HS256")
    OIDC_RP_IDP_SIGN_KEY = _FromSettings("OIDC_RP_IDP_SIGN_KEY", None)

    def __init__(self, *args, **kwargs):
        self.UserModel = get_user_model()

    def authenticate(self, request, **kwargs):
        # The callback view passes exactly these, after matching the state to the session's;
        # any other caller (a password form, the API token endpoint with ?code=&state=) is not
        # a single sign-on and gets nothing from this backend.
        match = getattr(request, "resolver_match", None)
        if (
            not sso_enabled()
            or set(kwargs) != {"nonce", "code_verifier"}
            or getattr(match, "url_name", None) != "oidc_authentication_callback"
        ):
            return None
        try:
            return super().authenticate(request, **kwargs)
        except (requests.RequestException, ImproperlyConfigured) as exc:
            log.warning("Single sign-on: the provider did not answer: %s", exc)
            request.sso_unreachable = True
        except (SuspiciousOperation, jwt.PyJWTError, ValueError, KeyError, TypeError) as exc:
            log.warning("Single sign-on refused: %s", exc)
        return None

    def verify_claims(self, claims):
        return bool(claims.get("sub"))

    def get_or_create_user(self, access_token, id_token, payload):
        """The account bound to the ID token's (issuer, sub), as sso/identity.py decides."""
        claims = self.get_userinfo(access_token, id_token, payload)
        issuer, subject = str(payload.get("iss") or ""), str(payload.get("sub") or "")
        audience = payload.get("aud")
        audience = [audience] if isinstance(audience, str) else list(audience or [])
        if issuer.rstrip("/") != settings.OIDC_ISSUER.rstrip("/"):
            raise SuspiciousOperation(f"The ID token comes from {issuer!r}, not the provider.")
        if self.OIDC_RP_CLIENT_ID not in audience:
            raise SuspiciousOperation("The ID token is not meant for this portal.")
        if not subject or str(claims.get("sub")) != subject:
            raise SuspiciousOperation("The provider's user info is about someone else.")
        user, created = identity_user(issuer=issuer, claims={**claims, "sub": subject})
        if not user.is_active:
            return user  # the callback refuses inactive accounts; nothing to refresh
        return self._refresh(user, claims, created=created)

    def _refresh(self, user, claims, *, created):
        user.first_name = str(claims.get("given_name") or user.first_name)[:150]
        user.last_name = str(claims.get("family_name") or user.last_name)[:150]
        if claims.get("email"):
            user.email = str(claims["email"])[:254]
        user.save(update_fields=["first_name", "last_name", "email"])
        groups = claims.get(settings.OIDC_GROUP_CLAIM) or []
        if isinstance(groups, str):
            groups = [groups]
        roles_apply(user=user, groups=[str(g) for g in groups], created=created)
        return user


def _grants(groups: list[str]) -> set[str]:
    grants: set[str] = set()
    for group in groups:
        value = settings.OIDC_ROLE_MAP.get(group) or []
        grants.update([value] if isinstance(value, str) else value)
    return grants


def _mentioned() -> set[str]:
    return _grants(list(settings.OIDC_ROLE_MAP))


def roles_apply(*, user, groups: list[str], created: bool = False) -> dict:
    """Make the user's memberships and roles what the map gives their groups, for everything
    the map mentions; returns {"before", "after"} of what it manages (audited when changed).

    Grants: "team:<slug>:member", "team:<slug>:lead", "manager:<department slug>", "finance",
    "platform-admin"."""
    from queues.models import Department, Membership, Team
    from queues.services.audit import audit

    grants, mentioned = _grants(groups), _mentioned()
    with transaction.atomic():
        before = roles_held(user=user, mentioned=mentioned)
        teams = {t.slug: t for t in Team.objects.filter(
            slug__in={g.split(":")[1] for g in mentioned if g.startswith("team:")})}  # fmt: skip
        for slug, team in teams.items():
            role = "lead" if f"team:{slug}:lead" in grants else (
                "member" if f"team:{slug}:member" in grants else None)  # fmt: skip
            if role is None:
                Membership.objects.filter(user=user, team=team).delete()
            else:
                Membership.objects.update_or_create(user=user, team=team, defaults={"role": role})
        departments = Department.objects.filter(
            slug__in={g.split(":", 1)[1] for g in mentioned if g.startswith("manager:")}
        )
        for department in departments:
            if f"manager:{department.slug}" in grants:
                department.managers.add(user)
            else:
                department.managers.remove(user)
        manages = user.managed_departments.exists()
        role_groups = {
            name: name_grant in grants
            for name_grant, name in ROLE_GROUPS.items()
            if name_grant in mentioned
        }
        if any(g.startswith("manager:") for g in mentioned):
            role_groups[GROUP_MANAGERS] = manages
        for name, wanted in role_groups.items():
            group, _ = Group.objects.get_or_create(name=name)
            (user.groups.add if wanted else user.groups.remove)(group)
        principal_forget(user)
        after = roles_held(user=user, mentioned=mentioned)
        if created or before != after:
            audit(actor=user, verb="sso.roles", obj=user,
                  message=f"Signed in with single sign-on; groups: {', '.join(groups) or 'none'}.",
                  before=before, after=after)  # fmt: skip
    return {"before": before, "after": after}


def roles_held(*, user, mentioned: set[str] | None = None) -> list[str]:
    """The grants (as the map writes them) the user holds now, among those the map mentions."""
    from queues.models import Membership

    held = {f"team:{m.team.slug}:{m.role}"
            for m in Membership.objects.filter(user=user).select_related("team")}  # fmt: skip
    held |= {f"manager:{d.slug}" for d in user.managed_departments.all()}
    names = set(user.groups.values_list("name", flat=True))
    held |= {grant for grant, name in ROLE_GROUPS.items() if name in names}
    if mentioned is not None:
        held = {grant for grant in held if _scope(grant) in {_scope(m) for m in mentioned}}
    return sorted(held)


def _scope(grant: str) -> str:
    """What a grant is about: a team ("team:vision"), a department or a role."""
    return ":".join(grant.split(":")[:2])
