"""A stand-in for a Compute Engine VM's metadata server (http://metadata.google.internal/computeMetadata/v1/).

Why: what reads the metadata server (tpuctl doctor's probe, google-auth, TensorFlow) must meet the
server's own contract, not a mock of the reader. It follows Compute Engine's documented behaviour
("About VM metadata", "Query VM metadata"):

* every request must carry ``Metadata-Flavor: Google``; without it, or with ``X-Forwarded-For`` (a
  request relayed from outside the VM), the answer is 403;
* every answer carries ``Metadata-Flavor: Google`` and ``Server: Metadata Server for VM``, an ``ETag``
  and a ``Date`` (the server's clock: ``clock_offset_s`` moves it, for clock-skew checks);
* an entry answers as text (``?alt=json``: JSON); a directory asked for without its trailing slash is
  a 301 to the slash form; a directory lists its entries one per line (subdirectories end with ``/``),
  and ``?recursive=true`` answers it as one JSON object (built-in keys in lowerCamelCase, as the server
  writes them, custom metadata keys as they were set);
* an unknown path is 404; a method other than GET is 405;
* a VM without a service account has an empty ``instance/service-accounts/``;
* ``instance/service-accounts/ACCOUNT/token`` (ACCOUNT: ``default`` or the account's email) answers the account's
  access token as JSON, ``{"access_token": ..., "expires_in": 3599, "token_type": "Bearer"}``, as Compute Engine's
  "Authenticate workloads: applications" shows
  (https://cloud.google.com/compute/docs/access/authenticate-workloads#applications); ``access_token`` is the
  stand-in's, for a server that checks it (tests/standins/gcs_proxy.py's BearerGate).

Point a client at it with ``GCE_METADATA_HOST=<standin.host>`` (google-auth, tpuctl's probe).
"""

from __future__ import annotations

import email.utils
import hashlib
import json
import threading
import time
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

PREFIX = "/computeMetadata/v1/"
SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]
TOKEN_LIFETIME_S = 3599  # the documented example's expires_in
FORBIDDEN_FLAVOR = "Your client does not have permission to get URL {path} from this server. Missing Metadata-Flavor:Google header."


def _camel(key: str) -> str:
    head, *rest = key.split("-")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def tpu_vm_attributes(accelerator_type: str = "v4-8", runtime_version: str = "tpu-vm-tf-2.15.0-pjrt", worker: int = 0) -> dict[str, str]:
    """The custom metadata a TPU VM's worker has (a trimmed `tpu-env`, as the TPU service writes it)."""
    tpu_env = "\n".join(
        [
            f"ACCELERATOR_TYPE: '{accelerator_type}'",
            "CHIPS_PER_HOST_BOUNDS: '2,2,1'",
            "HOST_BOUNDS: '1,1,1'",
            f"RUNTIME_VERSION: '{runtime_version}'",
            f"TYPE: '{accelerator_type.split('-')[0].upper()}'",
            f"WORKER_ID: '{worker}'",
            "ZONE: 'us-central2-b'",
            "",
        ]
    )
    return {"accelerator-type": accelerator_type, "agent-worker-number": str(worker), "tpu-env": tpu_env, "ssh-keys": ""}


class MetadataServer:
    """The stand-in: the VM's metadata tree, the server's clock, and the requests it saw. A context manager."""

    def __init__(
        self,
        attributes: Mapping[str, str] | None = None,
        service_account: str | None = "1234567890-compute@developer.gserviceaccount.com",
        clock_offset_s: float = 0.0,
        project_id: str = "tpuctl-test",
        hostname: str = "t1v-n-0-w-0.us-central2-b.c.tpuctl-test.internal",
        access_token: str = "ya29.metadata-standin-token",
    ) -> None:
        self.access_token = access_token
        self.attributes = dict(attributes or {})
        self.service_account = service_account
        self.clock_offset_s = clock_offset_s
        self.project_id = project_id
        self.hostname = hostname
        self.requests: list[tuple[str, str, int]] = []  # (method, path with query, status)
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    # --- the tree ---------------------------------------------------------------------------------

    def tree(self) -> dict[str, Any]:
        accounts: dict[str, Any] = {}
        if self.service_account:
            account = {"aliases": ["default"], "email": self.service_account, "scopes": list(SCOPES)}
            accounts = {"default": account, self.service_account: dict(account)}
        return {
            "instance": {
                "attributes": dict(self.attributes),
                "hostname": self.hostname,
                "id": 4520031799277581759,
                "machine-type": "projects/123456789012/machineTypes/n2d-standard-8",
                "name": self.hostname.split(".")[0],
                "service-accounts": accounts,
                "zone": "projects/123456789012/zones/us-central2-b",
                "maintenance-event": "NONE",
            },
            "project": {"numeric-project-id": 123456789012, "project-id": self.project_id, "attributes": {}},
        }

    def now(self) -> float:
        """The server's clock."""
        return time.time() + self.clock_offset_s

    def answer(self, method: str, target: str, headers: Mapping[str, str]) -> tuple[int, dict[str, str], bytes]:
        """(status, headers, body) for one request, by the documented contract."""
        parts = urlsplit(target)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        if headers.get("metadata-flavor") != "Google" or "x-forwarded-for" in headers:
            return 403, {"Content-Type": "text/html; charset=UTF-8"}, FORBIDDEN_FLAVOR.format(path=parts.path).encode()
        if method != "GET":
            return 405, {"Content-Type": "text/html; charset=UTF-8"}, b"Method Not Allowed"
        if parts.path == "/":  # what google-auth's ping asks: the server's root, listing its API versions
            return 200, {"Content-Type": "application/text"}, b"0.1/\ncomputeMetadata/\n"
        if parts.path + "/" == PREFIX:
            return 301, {"Location": PREFIX}, b""
        if not parts.path.startswith(PREFIX):
            return 404, {"Content-Type": "text/html; charset=UTF-8"}, b"Not Found"
        node: Any = self.tree()
        names = [name for name in parts.path[len(PREFIX) :].split("/") if name]
        if names[:2] == ["instance", "service-accounts"] and names[3:] == ["token"] and names[2] in node["instance"]["service-accounts"]:
            token = {"access_token": self.access_token, "expires_in": TOKEN_LIFETIME_S, "token_type": "Bearer"}
            return 200, {"Content-Type": "application/json"}, json.dumps(token).encode()
        in_attributes = False
        for name in names:
            if not isinstance(node, dict) or name not in node:
                return 404, {"Content-Type": "text/html; charset=UTF-8"}, b"Not Found"
            in_attributes = name == "attributes"
            node = node[name]
        if isinstance(node, dict):
            if not parts.path.endswith("/"):
                location = parts.path + "/" + (f"?{parts.query}" if parts.query else "")
                return 301, {"Location": location}, b""
            if query.get("recursive", "").lower() == "true":
                return 200, {"Content-Type": "application/json"}, json.dumps(self._json(node, in_attributes)).encode()
            listing = "".join(f"{key}/\n" if isinstance(value, dict) else f"{key}\n" for key, value in node.items())
            return 200, {"Content-Type": "application/text"}, listing.encode()
        if query.get("alt") == "json":
            return 200, {"Content-Type": "application/json"}, json.dumps(node).encode()
        text = "\n".join(map(str, node)) + "\n" if isinstance(node, list) else str(node)
        return 200, {"Content-Type": "application/text"}, text.encode()

    def _json(self, node: Any, custom: bool) -> Any:
        if not isinstance(node, dict):
            return node
        return {(key if custom else _camel(key)): self._json(value, key == "attributes") for key, value in node.items()}

    # --- lifecycle --------------------------------------------------------------------------------

    def start(self) -> MetadataServer:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        server.daemon_threads = True
        server.standin = self  # type: ignore[attr-defined]
        self._server = server
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="metadata-standin", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> MetadataServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def host(self) -> str:
        """HOST:PORT, as GCE_METADATA_HOST takes it."""
        if self._server is None:
            raise RuntimeError("the metadata stand-in is not started")
        host, port = self._server.server_address[:2]
        return f"{host!s}:{port}"

    def _record(self, method: str, target: str, status: int) -> None:
        with self._lock:
            self.requests.append((method, target, status))


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 30

    def _serve(self) -> None:
        standin: MetadataServer = self.server.standin  # type: ignore[attr-defined]
        status, headers, body = standin.answer(self.command, self.path, {k.lower(): v for k, v in self.headers.items()})
        standin._record(self.command, self.path, status)
        self.send_response_only(status)
        self.send_header("Metadata-Flavor", "Google")
        self.send_header("Server", "Metadata Server for VM")
        self.send_header("Date", email.utils.formatdate(standin.now(), usegmt=True))
        self.send_header("ETag", hashlib.sha1(body).hexdigest()[:16])
        self.send_header("X-XSS-Protection", "0")
        self.send_header("X-Frame-Options", "SAMEORIGIN")
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_DELETE = _serve

    def log_message(self, format: str, *args: Any) -> None:
        return
