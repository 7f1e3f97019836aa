"""The portal under its ASGI server (config/asgi_handler.py via `scripts/serve web`) behaves as
under WSGI: sign-in with CSRF and cookies, pages, static files streamed from disk, HEAD, a body
too large refused without a 500, and the client's address taken from the socket only."""

import http.client
import os
import re
import subprocess
import sys
import urllib.parse

import pytest
from django.contrib.auth.hashers import PBKDF2PasswordHasher

from tests.conftest import REPO_ROOT
from tests.factories import PASSWORD, UserFactory
from tests.web_server import web_server


def _request(port, method, path, *, body=None, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        answer = conn.getresponse()
        return answer, answer.read()
    finally:
        conn.close()


def _cookies(answer) -> dict:
    jar = {}
    for name, value in answer.getheaders():
        if name.lower() == "set-cookie":
            key, _, rest = value.partition("=")
            jar[key] = rest.split(";", 1)[0]
    return jar


@pytest.mark.slow
def test_the_portal_under_its_asgi_server(transactional_db, tmp_path):
    alice = UserFactory(username="alice")
    # Hashed as the server hashes (this process's tests use a fast hasher the server lacks).
    alice.password = PBKDF2PasswordHasher().encode(PASSWORD, "asgi-test-salt")
    alice.save(update_fields=["password"])
    static = tmp_path / "static"
    subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput", "-v0"], cwd=REPO_ROOT,
        env={**os.environ, "STATIC_ROOT": str(static)}, check=True, timeout=120,
    )  # fmt: skip
    with web_server(tmp_path, STATIC_ROOT=str(static)) as port:
        # Sign in through the form: the CSRF cookie and token, then the session cookie.
        answer, page = _request(port, "GET", "/accounts/login/")
        assert answer.status == 200
        jar = _cookies(answer)
        token = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
        form = urllib.parse.urlencode(
            {
                "csrfmiddlewaretoken": token.decode(),
                "username": "alice",
                "password": PASSWORD,
            }
        )
        cookie = "; ".join(f"{k}={v}" for k, v in jar.items())
        answer, _ = _request(port, "POST", "/accounts/login/", body=form, headers={
            "Content-Type": "application/x-www-form-urlencoded", "Cookie": cookie,
            "Referer": f"http://127.0.0.1:{port}/accounts/login/"})  # fmt: skip
        assert answer.status == 302, answer.status
        jar |= _cookies(answer)
        assert "sessionid" in jar
        cookie = "; ".join(f"{k}={v}" for k, v in jar.items())
        answer, page = _request(port, "GET", "/", headers={"Cookie": cookie})
        assert answer.status == 200 and b"alice" in page
        # Without the CSRF token the same form is refused.
        answer, _ = _request(port, "POST", "/accounts/login/", body=form.replace(
            "csrfmiddlewaretoken", "x"), headers={
            "Content-Type": "application/x-www-form-urlencoded", "Cookie": cookie})  # fmt: skip
        assert answer.status == 403
        # A static file, streamed from disk (a synchronous stream, read in a view thread).
        css = next(static.rglob("*.css"))
        answer, body = _request(port, "GET", "/static/" + str(css.relative_to(static)))
        assert answer.status == 200 and body == css.read_bytes()
        answer, body = _request(port, "HEAD", "/healthz")
        assert answer.status == 200 and body == b""
        # A body over DATA_UPLOAD_MAX_MEMORY_SIZE: refused, not a server error.
        answer, _ = _request(
            port,
            "POST",
            "/api/v1/auth/token/",
            body=b"x=" + b"y" * 400_000,
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        assert answer.status in (400, 413)
        # X-Forwarded-For from a client is not the client's address (TRUSTED_PROXY_COUNT is 0):
        # the lockout after failed sign-ins counts the socket's address, whatever it claims.
        for n in range(6):
            answer, _ = _request(port, "POST", "/api/v1/auth/token/",
                                 body="username=alice&password=wrong",
                                 headers={"Content-Type": "application/x-www-form-urlencoded",
                                          "X-Forwarded-For": f"10.0.0.{n}"})  # fmt: skip
        assert answer.status in (403, 429), answer.status
