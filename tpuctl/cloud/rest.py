"""JSON-over-HTTPS calls to Google APIs that have no client library among our dependencies.

Cloud Resource Manager IAM, the legacy ml v1 and serviceusage v1beta1 each need
one or two calls; google-auth's AuthorizedSession adds the token, and
google-api-core turns an error reply into the same exception types the TPU
client raises, so one `api_errors.explain` serves both.
"""

from __future__ import annotations

from typing import Any

from tpuctl.cloud import retry
from tpuctl.cloud.credentials import Identity

TIMEOUT_S = 60.0


class RestApi:
    def __init__(self, identity: Identity, endpoint: str) -> None:
        from google.auth.transport.requests import AuthorizedSession

        self._session = AuthorizedSession(identity.credentials)
        self.endpoint = endpoint.rstrip("/")

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """One call, retried on transient failures."""
        return retry.call(lambda: self._once(method, path, body))

    def _once(self, method: str, path: str, body: dict[str, Any] | None) -> dict[str, Any]:
        from google.api_core import exceptions as api

        response = self._session.request(method, f"{self.endpoint}/{path.lstrip('/')}", json=body, timeout=TIMEOUT_S)
        if response.status_code >= 400:
            raise api.from_http_response(response)
        if not response.content:
            return {}
        reply = response.json()
        return reply if isinstance(reply, dict) else {}
