"""Run the test provider as its own server for a test: set up its database in a folder of the
test's, serve it on a free port, and stop it afterwards."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import requests

from kubesim.testing import free_port

REPO = Path(__file__).resolve().parents[2]


@dataclass
class RunningProvider:
    issuer: str
    database: Path
    server: subprocess.Popen

    def rename(self, username: str, new_username: str) -> None:
        """Change a user's name at the provider (their `sub` stays)."""
        with contextlib.closing(sqlite3.connect(self.database)) as db, db:
            db.execute("UPDATE auth_user SET username = ? WHERE username = ?",
                       (new_username, username))  # fmt: skip

    def stop(self) -> None:
        if self.server.poll() is None:
            self.server.terminate()
            self.server.wait(timeout=10)


@contextlib.contextmanager
def provider_running(folder: Path, redirect_uris: list[str]):
    """The provider with the portal registered as its client (redirect_uris), serving."""
    port = free_port()
    database = folder / "op.db"
    env = {
        **os.environ, "OIDC_TEST_PORT": str(port), "OIDC_TEST_DB": str(database),
        "DJANGO_SETTINGS_MODULE": "tests.oidc_provider.settings", "PYTHONPATH": str(REPO),
    }  # fmt: skip
    subprocess.run([sys.executable, "-m", "tests.oidc_provider", "setup", *redirect_uris],
                   env=env, cwd=REPO, check=True, capture_output=True, timeout=120)  # fmt: skip
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.oidc_provider", "serve"], env=env, cwd=REPO,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    provider = RunningProvider(f"http://127.0.0.1:{port}/openid", database, server)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                url = f"{provider.issuer}/.well-known/openid-configuration"
                if requests.get(url, timeout=1).ok:
                    break
            except requests.ConnectionError:
                time.sleep(0.1)
        yield provider
    finally:
        provider.stop()
