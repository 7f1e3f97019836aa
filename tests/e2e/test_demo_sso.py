"""`make run SSO=1`: the demo's own OpenID Connect provider (demo/sso_provider, started as the
Procfile starts it, `scripts/serve oidc`) signs demo people into the portal, each with the roles
its groups map to (the role map `make run SSO=1` gives the portal)."""

import copy
import os
import subprocess
import time
from pathlib import Path

import pytest
import requests
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from config.settings import csp_origin
from demo.sso_provider.people import CLIENT_ID, CLIENT_SECRET, PASSWORD, ROLE_MAP
from kubesim.testing import free_port
from queues.models import Membership

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def demo_provider(live_server, tmp_path):
    """`scripts/serve oidc` on a free port, its state in a var/ of its own."""
    port = free_port()
    env = {**os.environ, "QM_VAR_DIR": str(tmp_path), "OIDC_DEMO_PORT": str(port),
           "PORTAL_URL": live_server.url}  # fmt: skip
    server = subprocess.Popen([str(REPO / "scripts" / "serve"), "oidc"], env=env, cwd=REPO,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    issuer = f"http://127.0.0.1:{port}/openid"
    try:
        for _ in range(300):
            try:
                if requests.get(f"{issuer}/.well-known/openid-configuration", timeout=1).ok:
                    break
            except requests.ConnectionError:
                time.sleep(0.1)
        else:
            pytest.fail("the demo provider did not start")
        yield issuer
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert (tmp_path / "oidc" / "provider.sqlite3").exists()


@pytest.fixture
def sso(settings, demo_provider, world):
    """The portal configured as `make run SSO=1` configures it."""
    settings.OIDC_ISSUER = demo_provider
    settings.OIDC_RP_CLIENT_ID, settings.OIDC_RP_CLIENT_SECRET = CLIENT_ID, CLIENT_SECRET
    settings.OIDC_PROVIDER_NAME = "the demo identity provider"
    settings.OIDC_ROLE_MAP = ROLE_MAP
    settings.AUTHENTICATION_BACKENDS = [*settings.AUTHENTICATION_BACKENDS,
                                        "sso.oidc.PortalOIDCBackend"]  # fmt: skip
    policy = copy.deepcopy(settings.CONTENT_SECURITY_POLICY)
    policy["DIRECTIVES"]["form-action"].append(csp_origin(demo_provider))
    settings.CONTENT_SECURITY_POLICY = policy
    return world


def test_demo_people_sign_in_through_the_demo_provider_with_their_roles(page, sso):
    page.goto("/accounts/login/")
    page.get_by_role("link", name="Sign in with the demo identity provider").click()
    # The provider's page lists its people and what each becomes in the portal.
    expect(page.locator("table")).to_contain_text("lead of nlp")
    page.get_by_label("Demo user").fill("henry")
    page.get_by_label("Demo password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in to the demo provider").click()
    expect(page.get_by_role("button", name="Log out")).to_be_visible()
    henry = get_user_model().objects.get(email="henry@idp.example.org")
    membership = Membership.objects.get(user=henry)
    assert (membership.team, membership.role) == (sso["nlp"], "lead")
    page.get_by_role("button", name="Log out").click()
    page.wait_for_url("**/accounts/login/")
    # A manager of Research, by the provider's group.
    page.get_by_role("link", name="Sign in with the demo identity provider").click()
    page.get_by_label("Demo user").fill("ines")
    page.get_by_label("Demo password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in to the demo provider").click()
    expect(page.get_by_role("button", name="Log out")).to_be_visible()
    ines = get_user_model().objects.get(email="ines@idp.example.org")
    assert list(ines.managed_departments.all()) == [sso["research"]]
