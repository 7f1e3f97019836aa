"""Single sign-on in Chromium against a real OpenID Connect provider (django-oidc-provider,
run as its own server by the test): the redirect, the provider's sign-in, the callback, the
user created at first sign-in with the group claim mapped to a team lead, a department manager
and finance, and signing out at the portal and the provider; with local passwords off, the
password form is gone while API tokens keep working for scripts."""

import copy

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from config.settings import csp_origin
from queues.models import AuditEvent, Membership
from queues.services.tenancy import api_token_create
from tests.oidc_provider.running import provider_running

BACKEND = "sso.oidc.PortalOIDCBackend"


@pytest.fixture
def provider(live_server, tmp_path):
    with provider_running(tmp_path, [f"{live_server.url}/oidc/callback/"]) as running:
        yield running.issuer


@pytest.fixture
def sso(settings, provider, world):
    settings.OIDC_ISSUER = provider
    settings.OIDC_RP_CLIENT_ID = "quartermaster"
    settings.OIDC_RP_CLIENT_SECRET = "portal-client-secret"
    settings.OIDC_RP_SCOPES = "openid email profile groups"
    settings.OIDC_PROVIDER_NAME = "Acme"
    settings.OIDC_ROLE_MAP = {
        "gpu-vision-leads": ["team:vision:lead"], "research-managers": "manager:research",
        "gpu-nlp": "team:nlp:member", "finance-team": "finance",
    }  # fmt: skip
    settings.AUTHENTICATION_BACKENDS = [*settings.AUTHENTICATION_BACKENDS, BACKEND]
    # What settings.py adds for OIDC_ISSUER: signing out ends at the provider.
    policy = copy.deepcopy(settings.CONTENT_SECURITY_POLICY)
    policy["DIRECTIVES"]["form-action"].append(csp_origin(provider))
    settings.CONTENT_SECURITY_POLICY = policy
    return world


def _sign_in_with_acme(page, username):
    page.goto("/accounts/login/")
    page.get_by_role("link", name="Sign in with Acme").click()
    page.get_by_label("Acme user").fill(username)
    page.get_by_label("Acme password").fill("acme-pass")
    page.get_by_role("button", name="Sign in to Acme").click()


def test_a_user_signs_in_with_the_identity_provider_and_gets_the_mapped_roles(page, sso):
    _sign_in_with_acme(page, "dana")
    expect(page.get_by_role("button", name="Log out")).to_be_visible()
    expect(page.locator("body")).to_contain_text("Dana Okafor")
    dana = get_user_model().objects.get(username="dana")
    assert (dana.first_name, dana.email) == ("Dana", "dana@acme.example")
    assert not dana.has_usable_password()
    assert Membership.objects.get(user=dana).role == "lead"
    assert Membership.objects.get(user=dana).team == sso["vision"]
    assert list(dana.managed_departments.all()) == [sso["research"]]
    event = AuditEvent.objects.get(verb="sso.roles", object_id=str(dana.pk))
    assert event.after == ["manager:research", "team:vision:lead"] and event.before == []
    # Signing out ends the session here and at the provider, and comes back to the login page.
    page.get_by_role("button", name="Log out").click()
    page.wait_for_url("**/accounts/login/")
    page.get_by_role("link", name="Sign in with Acme").click()
    expect(page.get_by_label("Acme user")).to_be_visible()  # the provider asks again


def test_local_passwords_off_leaves_single_sign_on_and_api_tokens(page, sso, settings, api):
    settings.LOCAL_PASSWORDS = False
    settings.AUTHENTICATION_BACKENDS = [
        b for b in settings.AUTHENTICATION_BACKENDS if not b.endswith("ModelBackend")
    ]
    page.goto("/accounts/login/")
    expect(page.get_by_label("Password")).to_have_count(0)
    password = {"username": "alice", "password": "quartermaster"}
    refused = page.request.post("/api/v1/auth/token/", form=password)
    assert refused.status in (400, 401)
    _, raw = api_token_create(user=sso["alice"], name="script")
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert api.get("/api/v1/me/").json()["username"] == "alice"
    _sign_in_with_acme(page, "erin")
    expect(page.get_by_role("button", name="Log out")).to_be_visible()
    erin = get_user_model().objects.get(username="erin")
    assert erin.groups.filter(name="finance").exists()
    assert Membership.objects.get(user=erin).team == sso["nlp"]
