"""Sign-in cannot be guessed at: failures are counted per username and client address in the
database (every web worker shares it), on the login page and the token endpoint alike; forwarded
headers count only behind configured proxies; tokens expire, are capped and show their use."""

from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils import timezone

from queues.models import ApiToken
from queues.services.tenancy import api_token_create
from tests.factories import PASSWORD

LOGIN = "/accounts/login/"
TOKEN = "/api/v1/auth/token/"


def _login(client, password, **headers):
    return client.post(LOGIN, {"username": "alice", "password": password}, **headers)


def test_twenty_wrong_passwords_then_the_right_one_is_refused(world, client, settings):
    for _ in range(20):
        _login(client, "wrong")
    response = _login(client, PASSWORD)
    assert response.status_code == 429
    assert "Too many failed sign-ins" in response.content.decode()
    assert f"Try again in {settings.AXES_COOLOFF_TIME.seconds // 60} minutes" in (
        response.content.decode()
    )
    assert "_auth_user_id" not in client.session
    # The counter is in the database, which every gunicorn worker reads.
    assert AccessAttempt.objects.get(username="alice").failures_since_start >= 5


def test_a_forged_forwarded_for_does_not_bypass_the_lockout(world, client):
    for n in range(6):
        _login(client, "wrong", HTTP_X_FORWARDED_FOR=f"10.0.0.{n}")
    response = _login(client, PASSWORD, HTTP_X_FORWARDED_FOR="192.0.2.77")
    assert response.status_code == 429


def test_behind_a_trusted_proxy_the_forwarded_address_is_the_client(world, client, settings):
    settings.TRUSTED_PROXY_COUNT = 1
    for _ in range(6):
        _login(client, "wrong", HTTP_X_FORWARDED_FOR="198.51.100.1")
    assert _login(client, PASSWORD, HTTP_X_FORWARDED_FOR="198.51.100.1").status_code == 429
    # Another client behind the same proxy is not locked out by the first one's mistakes.
    assert _login(client, PASSWORD, HTTP_X_FORWARDED_FOR="198.51.100.2").status_code == 302


def test_the_token_endpoint_shares_the_lockout(world, api):
    for _ in range(5):
        wrong = api.post(TOKEN, {"username": "alice", "password": "wrong"})
        assert wrong.status_code in (400, 429)
    locked = api.post(TOKEN, {"username": "alice", "password": PASSWORD})
    assert locked.status_code == 429
    assert "Too many failed sign-ins" in locked.json()["detail"]
    assert int(locked["Retry-After"]) > 0
    assert not ApiToken.objects.filter(user=world["alice"]).exists()


def test_a_success_resets_the_count(world, client):
    for _ in range(3):
        _login(client, "wrong")
    assert _login(client, PASSWORD).status_code == 302
    client.logout()
    for _ in range(3):
        _login(client, "wrong")
    assert _login(client, PASSWORD).status_code == 302


@pytest.mark.parametrize("password", ["password123", "84736251908", "qwertyuiop"])
def test_common_and_numeric_passwords_are_refused(password):
    with pytest.raises(ValidationError):
        validate_password(password)


def test_tokens_expire_and_say_so(world, api, settings):
    settings.API_TOKEN_DAYS = 30
    token, raw = api_token_create(user=world["alice"], name="laptop")
    assert timedelta(days=29) < token.expires_at - timezone.now() <= timedelta(days=30)
    auth = {"HTTP_AUTHORIZATION": f"Bearer {raw}"}
    assert api.get("/api/v1/me/", **auth).status_code == 200
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    expired = api.get("/api/v1/me/", **auth)
    assert expired.status_code == 401 and "expired" in expired.json()["detail"]


def test_a_user_holds_a_bounded_number_of_tokens(world, api, settings, client):
    settings.API_TOKENS_PER_USER = 2
    for name in ("one", "two"):
        assert (
            api.post(TOKEN, {"username": "alice", "password": PASSWORD, "name": name}).status_code
            == 201
        )
    third = api.post(TOKEN, {"username": "alice", "password": PASSWORD, "name": "three"})
    assert third.status_code == 400 and "2 active tokens" in third.json()["name"][0]
    client.force_login(world["alice"])
    page = client.post(reverse("profile"), {"name": "four"})
    assert page.status_code == 200 and "2 active tokens" in page.content.decode()
    ApiToken.objects.filter(name="one").update(revoked_at=timezone.now())
    assert (
        api.post(TOKEN, {"username": "alice", "password": PASSWORD, "name": "five"}).status_code
        == 201
    )


def test_the_profile_shows_last_use_and_expiry(world, api, client):
    token, raw = api_token_create(user=world["alice"], name="ci")
    api.get("/api/v1/me/", HTTP_AUTHORIZATION=f"Bearer {raw}")
    client.force_login(world["alice"])
    html = client.get(reverse("profile")).content.decode()
    token.refresh_from_db()
    assert token.last_used_at is not None
    assert token.last_used_at.strftime("%Y-%m-%d %H:%M") in html
    assert token.expires_at.strftime("%Y-%m-%d") in html
