"""Who a sign-in through the identity provider is, against the real test provider (run as its
own server): an account is bound to the provider's (issuer, sub) and found by it again, never by
a name or e-mail the user can choose; an existing local account is linked only through an
e-mail the provider verified, and only where the operator allows it; local sign-in (web and API)
works while the provider is down, and the API token endpoint takes a username and password only.
"""

from __future__ import annotations

import html
import re
from urllib.parse import urlencode, urljoin

import pytest
import requests
from django.contrib.auth import get_user_model
from django.urls import reverse

from core.roles import is_platform_admin
from kubesim.testing import free_port
from queues.models import ApiToken, AuditEvent, Membership
from sso import oidc
from tests.factories import PASSWORD as LOCAL_PASSWORD
from tests.oidc_provider.running import provider_running
from tests.oidc_provider.users import PASSWORD

pytestmark = pytest.mark.slow

CALLBACK = "http://testserver/oidc/callback/"
BACKEND = "sso.oidc.PortalOIDCBackend"
User = get_user_model()


@pytest.fixture(scope="module")
def provider(tmp_path_factory):
    with provider_running(tmp_path_factory.mktemp("provider"), [CALLBACK]) as running:
        yield running


def _configure(settings, issuer):
    settings.OIDC_ISSUER = issuer
    settings.OIDC_RP_CLIENT_ID = "quartermaster"
    settings.OIDC_RP_CLIENT_SECRET = "portal-client-secret"
    settings.OIDC_RP_SCOPES = "openid email profile groups"
    settings.OIDC_PROVIDER_NAME = "Acme"
    settings.OIDC_ROLE_MAP = {"gpu-vision-leads": "team:vision:lead",
                              "gpu-vision": "team:vision:member"}  # fmt: skip
    if BACKEND not in settings.AUTHENTICATION_BACKENDS:
        settings.AUTHENTICATION_BACKENDS = [*settings.AUTHENTICATION_BACKENDS, BACKEND]


@pytest.fixture
def sso(settings, provider, world):
    _configure(settings, provider.issuer)
    return world


def _through_provider(url: str, username: str) -> str:
    """Follow the provider's pages from `url` as a browser would, signing in as `username`;
    returns the URL it sends the browser back to (the portal's callback)."""
    browser = requests.Session()
    answer = browser.get(url, allow_redirects=False, timeout=10)
    for _ in range(10):
        location = answer.headers.get("Location")
        if answer.status_code in (301, 302, 303) and location:
            url = urljoin(answer.url, location)
            if url.startswith(CALLBACK):
                return url
            answer = browser.get(url, allow_redirects=False, timeout=10)
        elif 'name="password"' in answer.text:
            form = {
                "csrfmiddlewaretoken": re.search(
                    r'name="csrfmiddlewaretoken" value="([^"]+)"', answer.text
                ).group(1),
                "next": html.unescape(re.search(r'name="next" value="([^"]*)"', answer.text)[1]),
                "username": username,
                "password": PASSWORD,
            }
            answer = browser.post(answer.url, data=form, allow_redirects=False, timeout=10)
        else:
            raise AssertionError(f"The provider answered {answer.status_code}: {answer.text[:300]}")
    raise AssertionError("The provider never sent the browser back to the portal.")


def _sign_in(client, username: str):
    """Single sign-on as the provider's `username`, through the portal's own redirect and
    callback; returns the callback's answer."""
    start = client.get(reverse("oidc_authentication_init"))
    assert start.status_code == 302, start
    back = _through_provider(start["Location"], username)
    return client.get(back.removeprefix("http://testserver"))


def _signed_in(client):
    user_id = client.session.get("_auth_user_id")
    return User.objects.get(pk=user_id) if user_id else None


def test_an_account_is_bound_to_the_providers_subject_and_found_by_it_again(client, sso, provider):
    from sso.models import Identity

    assert _sign_in(client, "erin").status_code == 302
    erin = _signed_in(client)
    identity = Identity.objects.get(user=erin)
    assert identity.issuer == provider.issuer and identity.subject
    client.logout()
    # Renamed at the provider (same sub): still the same account, not a new one.
    provider.rename("erin", "erin-married")
    try:
        _sign_in(client, "erin-married")
    finally:
        provider.rename("erin-married", "erin")
    assert _signed_in(client) == erin
    assert Identity.objects.count() == 1


def test_an_identity_called_admin_does_not_land_in_the_local_admin(client, sso):
    admin = sso["admin"]
    _sign_in(client, "admin")  # preferred_username "admin", e-mail admin@anything.example
    user = _signed_in(client)
    assert user is not None and user != admin
    assert user.username != "admin" and not is_platform_admin(user)
    client.logout()
    _sign_in(client, "mallory")  # no preferred_username, unverified e-mail admin@evil.example
    other = _signed_in(client)
    assert other is not None and other not in (admin, user)
    assert not is_platform_admin(other)
    admin.refresh_from_db()
    assert admin.email == "admin@example.org" and admin.has_usable_password()


def test_a_local_account_with_the_same_name_or_email_is_not_linked_by_default(client, sso):
    _sign_in(client, "alice-sso")  # preferred_username "alice", alice's e-mail, verified
    user = _signed_in(client)
    assert user is not None and user != sso["alice"]
    assert not Membership.objects.filter(user=sso["alice"]).exclude(role="member").exists()


def test_a_verified_email_links_a_local_account_where_the_operator_allows(client, sso, settings):
    from sso.models import Identity

    settings.OIDC_LINK_VERIFIED_EMAIL = True
    _sign_in(client, "eve")  # alice's e-mail, not verified by the provider
    eve = _signed_in(client)
    assert eve is not None and eve != sso["alice"]
    client.logout()
    _sign_in(client, "alice-sso")  # alice's e-mail, verified
    assert _signed_in(client) == sso["alice"]
    assert Identity.objects.get(user=sso["alice"]).subject
    assert AuditEvent.objects.filter(verb="sso.link", object_id=str(sso["alice"].pk)).exists()
    # The local password still works: linking adds a way in, it does not take one away.
    sso["alice"].refresh_from_db()
    assert sso["alice"].check_password(LOCAL_PASSWORD)


def test_the_token_endpoint_does_not_exchange_a_providers_code(client, sso, provider):
    """A code from the provider (here one fetched without the web flow's state, nonce or PKCE)
    sent to the token endpoint with any username and password is refused, not exchanged."""
    authorize = f"{provider.issuer}/authorize?" + urlencode({
        "client_id": "quartermaster", "redirect_uri": CALLBACK, "response_type": "code",
        "scope": "openid email profile groups", "state": "chosen-by-the-caller",
    })  # fmt: skip
    back = _through_provider(authorize, "dana")
    answer = client.post(
        reverse("api-token-obtain") + "?" + back.split("?", 1)[1],
        {"username": "nobody", "password": "anything"},
    )
    assert answer.status_code == 400, answer.content
    assert not ApiToken.objects.exists()
    assert not User.objects.filter(first_name="Dana").exists()


def _local_sign_in_works(client, world):
    page = client.post(
        reverse("login"), {"username": "alice", "password": LOCAL_PASSWORD}, follow=False
    )
    assert page.status_code == 302, page.content[:300]
    assert _signed_in(client) == world["alice"]
    token = client.post(reverse("api-token-obtain"),
                        {"username": "alice", "password": LOCAL_PASSWORD})  # fmt: skip
    assert token.status_code == 201, token.content[:300]


def test_local_sign_in_works_when_the_provider_never_answered(client, settings, world):
    _configure(settings, f"http://127.0.0.1:{free_port()}/openid")
    _local_sign_in_works(client, world)
    client.logout()
    # The single sign-on button says so instead of failing.
    answer = client.get(reverse("oidc_authentication_init"), follow=True)
    assert "Acme does not answer now" in answer.content.decode()


def test_local_sign_in_works_when_the_provider_goes_down(client, settings, world, tmp_path):
    with provider_running(tmp_path, [CALLBACK]) as running:
        _configure(settings, running.issuer)
        oidc.discovery_document()  # the portal knew the provider's endpoints
        start = client.get(reverse("oidc_authentication_init"))
        back = _through_provider(start["Location"], "dana")
        running.stop()
        # The provider went down between the sign-in and the callback: the login page says so.
        answer = client.get(back.removeprefix("http://testserver"), follow=True)
        assert answer.status_code == 200
        assert "did not complete: Acme does not answer now" in answer.content.decode()
        assert _signed_in(client) is None
        _local_sign_in_works(client, world)
