"""JSON-over-HTTPS calls to Google APIs that have no client library among our dependencies.

Cloud Resource Manager IAM, the legacy ml v1 and serviceusage v1beta1 each need
one or two calls; google-auth's AuthorizedSession adds the token, and
`api_errors.error_from_reply` turns an error reply into the same google-api-core
exception types the TPU client raises, so one `api_errors.explain` serves both.
"""

from __future__ import annotations

from typing import Any

from tpuctl.cloud.auth.credentials import Identity
from tpuctl.cloud.plumbing import retry
from tpuctl.cloud.plumbing.api_errors import error_from_reply


class RestApi:
    def __init__(self, identity: Identity, endpoint: str) -> None:
        from google.auth.transport.requests import AuthorizedSession

        self._session = retry.bounded(AuthorizedSession(identity.credentials))
        self.endpoint = endpoint.rstrip("/")

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """One call, retried on transient failures within the command's deadline (tpuctl/cloud/plumbing/retry.py)."""
        return retry.call(lambda: self._once(method, path, body))

    def call_once(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """One call, never repeated here: for a create whose lost reply may still have created something."""
        return retry.call(lambda: self._once(method, path, body), attempts=1)

    def _once(self, method: str, path: str, body: dict[str, Any] | None) -> dict[str, Any]:
        url = f"{self.endpoint}/{path.lstrip('/')}"
        response = self._session.request(method, url, json=body, timeout=retry.timeout(retry.REQUEST_S, self.endpoint))
        if response.status_code >= 400:
            raise error_from_reply(response.status_code, response.content, method, url)
        if not response.content:
            return {}
        reply = response.json()
        return reply if isinstance(reply, dict) else {}
