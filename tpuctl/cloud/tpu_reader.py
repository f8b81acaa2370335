"""Read-only Cloud TPU v2 calls over plain HTTP, for `list` and `describe`.

Importing google-cloud-tpu costs about 0.3 s, more than the whole of a
`tpuctl list` may take (benchmarks/list_nodes.py: a quarter of gcloud's time).
These views need a few GETs and the API's own JSON, which is also exactly what
`--json` prints, so they speak REST directly with the stdlib. Changes to nodes
go through google-cloud-tpu (tpuctl.cloud.tpu). Failures become the same
google-api-core exceptions, so retries and messages are shared.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlencode, urlsplit

from tpuctl import __version__
from tpuctl.cloud.api_errors import Where, guarded, names_location
from tpuctl.errors import FAILED, TpuctlError
from tpuctl.settings import Settings

T = TypeVar("T")
TIMEOUT_S = 60.0
JSON = dict[str, Any]


class TpuReader:
    def __init__(self, token: str, settings: Settings) -> None:
        self.project = settings.project
        self.endpoint = settings.require("tpu-endpoint").rstrip("/")
        parts = urlsplit(self.endpoint)
        self._https = parts.scheme == "https"
        self._host = parts.hostname or ""
        self._port = parts.port
        self._base = parts.path
        self._headers = {
            "Authorization": f"Bearer {token}",
            "Accept": "application/json",
            "User-Agent": f"tpuctl/{__version__}",
        }

    def _get(self, path: str, query: dict[str, str] | None = None) -> JSON:
        connection: http.client.HTTPConnection
        if self._https:
            connection = http.client.HTTPSConnection(self._host, self._port, timeout=TIMEOUT_S)
        else:
            connection = http.client.HTTPConnection(self._host, self._port, timeout=TIMEOUT_S)
        target = f"{self._base}/v2/{path}" + (f"?{urlencode(query)}" if query else "")
        try:
            connection.request("GET", target, headers=self._headers)
            response = connection.getresponse()
            body = response.read()
        finally:
            connection.close()
        if response.status >= 400:
            raise _api_error(response.status, body, f"{self.endpoint}/v2/{path}")
        try:
            reply = json.loads(body) if body else {}
        except ValueError:
            raise TpuctlError(f"the TPU API at {self.endpoint} did not answer with JSON", exit_code=FAILED) from None
        return reply if isinstance(reply, dict) else {}

    def _pages(self, path: str, key: str) -> list[JSON]:
        items: list[JSON] = []
        token = ""
        while True:
            reply = self._get(path, {"pageToken": token} if token else None)
            items += reply.get(key, [])
            token = reply.get("nextPageToken", "")
            if not token:
                return items

    def _call(self, fn: Callable[[], T], action: str, zone: str | None, permission: str) -> T:
        return guarded(fn, Where(action, self.project, zone, permission))

    def zones(self) -> list[str]:
        found = self._call(lambda: self._pages(f"projects/{self.project}/locations", "locations"), "list zones", None, "tpu.locations.list")
        return sorted(str(location.get("locationId", "")) for location in found)

    def accelerator_types(self, zone: str) -> list[JSON]:
        path = f"projects/{self.project}/locations/{zone}/acceleratorTypes"
        found = self._call(lambda: self._pages(path, "acceleratorTypes"), "list accelerator types", zone, "tpu.acceleratortypes.list")
        return sorted(found, key=lambda a: _type_order(str(a.get("type", ""))))

    def runtime_versions(self, zone: str) -> list[str]:
        path = f"projects/{self.project}/locations/{zone}/runtimeVersions"
        found = self._call(lambda: self._pages(path, "runtimeVersions"), "list runtime versions", zone, "tpu.runtimeversions.list")
        return sorted(str(r.get("version", "")) for r in found)

    def nodes(self, zone: str) -> list[JSON]:
        path = f"projects/{self.project}/locations/{zone}/nodes"
        return self._call(lambda: self._pages(path, "nodes"), "list nodes", zone, "tpu.nodes.list")

    def node(self, zone: str, name: str) -> JSON | None:
        """The node, or None when there is none of that name (a zone that does not exist is an error)."""
        from google.api_core import exceptions as api

        where = Where(f"get node {name}", self.project, zone, "tpu.nodes.get")

        def get() -> JSON | None:
            try:
                return self._get(f"projects/{self.project}/locations/{zone}/nodes/{name}")
            except api.NotFound as exc:
                if names_location(exc, where):
                    raise
                return None

        return guarded(get, where)


def _api_error(status: int, body: bytes, url: str) -> Exception:
    """google-api-core's exception for this reply, built as its REST transport builds them."""
    import requests
    from google.api_core import exceptions as api

    response = requests.Response()
    response.status_code = status
    response._content = body
    response.request = requests.Request("GET", url).prepare()
    return api.from_http_response(response)


def _type_order(name: str) -> tuple[str, int]:
    """v4-8 before v4-16 before v4-128: by family, then by size."""
    family, _, size = name.rpartition("-")
    return (family, int(size) if size.isdigit() else 0)
