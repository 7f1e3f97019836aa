"""A small client for the local API server: server-side apply, get, (dry-run) create, with the
admin client certificate. The set-up talks to the API server before any webhook answers (and
while aggregated APIs are unavailable), so it resolves resources by asking the one group
version it needs instead of discovering the whole API as the official client's dynamic client
does."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import requests

FIELD_MANAGER = "quartermaster-real-cluster"


class ApiError(RuntimeError):
    """A request the API server refused, with its status and message."""

    def __init__(self, status: int, message: str):
        super().__init__(f"{status}: {message}")
        self.status = status


@dataclass
class Api:
    """The API server at url, as the holder of cert/key, trusting ca."""

    url: str
    ca: Path
    cert: Path
    key: Path
    timeout: float = 30.0
    _session: requests.Session = field(default_factory=requests.Session, repr=False)
    _resources: dict[str, dict[str, tuple[str, bool]]] = field(default_factory=dict, repr=False)

    def __post_init__(self):
        self._session.cert = (str(self.cert), str(self.key))

    def request(self, method: str, path: str, **kwargs) -> requests.Response:
        kwargs.setdefault("timeout", self.timeout)
        # Per request: a session's own `verify` loses to REQUESTS_CA_BUNDLE in the environment.
        kwargs.setdefault("verify", str(self.ca))
        return self._session.request(method, self.url + path, **kwargs)

    def _json(self, response: requests.Response) -> dict:
        if response.status_code >= 400:
            try:
                message = response.json().get("message") or response.text
            except ValueError:
                message = response.text
            raise ApiError(response.status_code, message)
        return response.json() if response.content else {}

    def get(self, path: str, **params) -> dict:
        return self._json(self.request("GET", path, params=params))

    def resource(self, api_version: str, kind: str) -> tuple[str, bool]:
        """(plural name, namespaced) of a kind in a group version."""
        if api_version not in self._resources:
            base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
            listing = self.get(base)
            self._resources[api_version] = {
                r["kind"]: (r["name"], r["namespaced"])
                for r in listing.get("resources", [])
                if "/" not in r["name"]
            }
        try:
            return self._resources[api_version][kind]
        except KeyError:
            raise ApiError(404, f"{api_version} serves no {kind}") from None

    def path(self, obj: dict, *, with_name: bool = True) -> str:
        api_version, kind = obj["apiVersion"], obj["kind"]
        plural, namespaced = self.resource(api_version, kind)
        base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
        meta = obj.get("metadata") or {}
        if namespaced:
            base += f"/namespaces/{meta.get('namespace') or 'default'}"
        base += f"/{plural}"
        return f"{base}/{meta['name']}" if with_name else base

    def apply(self, obj: dict, *, force: bool = True) -> dict:
        """Server-side apply of one object."""
        response = self.request(
            "PATCH",
            self.path(obj),
            params={"fieldManager": FIELD_MANAGER, "force": "true" if force else "false"},
            data=json.dumps(obj),
            headers={"Content-Type": "application/apply-patch+yaml"},
        )
        return self._json(response)

    def create(self, obj: dict, *, dry_run: bool = False) -> dict:
        params = {"dryRun": "All"} if dry_run else {}
        response = self.request(
            "POST", self.path(obj, with_name=False), params=params, data=json.dumps(obj)
        )
        return self._json(response)
