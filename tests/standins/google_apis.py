"""A local stand-in for the Google APIs tpuctl talks to, served over plain HTTP.

Why: tests must run the real client libraries (google-cloud-tpu's REST
transport, google-auth, requests) and gcloud itself, not mocks of them, so
that a wrong URL, a misspelled JSON field, an unhandled error shape or a
retry that creates a node twice fails a test here rather than in a user's
project. One ThreadingHTTPServer on 127.0.0.1 serves every API on one port:

* OAuth token endpoint ``POST /token`` (refresh_token and jwt-bearer grants);
* Cloud TPU v2 ``/v2/...`` (see tpu_api.py);
* Cloud Resource Manager v1 ``/v1/projects/P`` and ``:getIamPolicy`` / ``:setIamPolicy``;
* AI Platform ml v1 ``GET /v1/projects/P:getConfig``;
* Service Usage v1beta1 ``:generateServiceIdentity`` and v1 ``services/S`` get / ``:enable``;
* Vertex AI v1 custom jobs ``/v1/projects/P/locations/L/customJobs...`` (see vertex_api.py);
* Cloud Billing Catalog v1 ``GET /v1/services/S/skus`` (see billing_api.py), by bearer token or ``key=``;
* Cloud Quotas v1 ``GET /v1/projects/P/locations/global/services/S/quotaInfos`` (paged; see project_apis.py);
* Cloud Storage ``GET /storage/v1/b/B`` (a bucket with its location);
* Cloud Logging v2 ``POST /v2/entries:list`` (see logging_api.py), routed before the TPU's ``/v2/``;
* Cloud Storage JSON API ``/storage/v1/b/B/iam`` (GET / PUT, etag) and IAM v1 service-account
  ``:getIamPolicy`` / ``:setIamPolicy`` / ``:testIamPermissions`` (and CRM ``:testIamPermissions``).

Replies follow Google's JSON conventions (lowerCamel names, proto3 omission
of empty fields, ``{"error": {...}}`` with canonical status and details), and
the faults in faults.py reproduce the failures those APIs really produce.

Layout: this module is the server, authentication and the test-facing API;
tpu_api.py / tpu_queued.py hold the TPU state machine, project_apis.py the
Resource Manager, ml and Service Usage calls, catalog.py the zones and
accelerator tables, wire.py error shapes and request-body checking.
"""

from __future__ import annotations

import base64
import copy
import json
import random
import re
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, parse_qsl, unquote, urlsplit

from tests.standins import catalog
from tests.standins.billing_api import BillingCatalog, encode
from tests.standins.faults import Faults
from tests.standins.project_apis import SERVICE_TITLES, ProjectApis
from tests.standins.tpu_api import TpuService
from tests.standins.vertex_api import VertexService
from tests.standins.wire import (
    JSON,
    ApiError,
    enums_as_numbers,
    invalid,
    permission_denied,
    service_disabled,
    transient,
    unauthenticated,
    unknown_project,
)

_P = r"projects/(?P<p>[^/:]+)"
# (method, path regex, handler, service, permission, resource template) for the non-TPU APIs.
_OTHER_ROUTES: list[tuple[str, re.Pattern[str], str, str, str, str]] = [
    (m, re.compile(rx + r"\Z"), h, svc, perm, res)
    for m, rx, h, svc, perm, res in [
        ("GET", r"/v1/" + _P, "crm_get_project", "cloudresourcemanager.googleapis.com", "resourcemanager.projects.get", "projects/{p}"),
        (
            "POST",
            r"/v1/" + _P + r":getIamPolicy",
            "crm_get_policy",
            "cloudresourcemanager.googleapis.com",
            "resourcemanager.projects.getIamPolicy",
            "projects/{p}",
        ),
        (
            "POST",
            r"/v1/" + _P + r":setIamPolicy",
            "crm_set_policy",
            "cloudresourcemanager.googleapis.com",
            "resourcemanager.projects.setIamPolicy",
            "projects/{p}",
        ),
        ("GET", r"/v1/" + _P + r":getConfig", "ml_get_config", "ml.googleapis.com", "ml.projects.getConfig", "projects/{p}"),
        (
            "POST",
            r"/v1beta1/" + _P + r"/services/(?P<s>[^/:]+):generateServiceIdentity",
            "su_generate_identity",
            "serviceusage.googleapis.com",
            "serviceusage.services.use",
            "projects/{p}/services/{s}",
        ),
        (
            "GET",
            r"/v1/" + _P + r"/services/(?P<s>[^/:]+)",
            "su_get_service",
            "serviceusage.googleapis.com",
            "serviceusage.services.get",
            "projects/{p}/services/{s}",
        ),
        (
            "POST",
            r"/v1/" + _P + r"/services/(?P<s>[^/:]+):enable",
            "su_enable",
            "serviceusage.googleapis.com",
            "serviceusage.services.enable",
            "projects/{p}/services/{s}",
        ),
        (
            "POST",
            r"/v1/" + _P + r":testIamPermissions",
            "crm_test_permissions",
            "cloudresourcemanager.googleapis.com",
            "resourcemanager.projects.get",
            "projects/{p}",
        ),
        # Bucket paths name no project: the stand-in's buckets all belong to its project.
        ("GET", r"/storage/v1/b/(?P<b>[^/]+)", "storage_get_bucket", "storage.googleapis.com", "storage.buckets.get", "projects/_/buckets/{b}"),
        (
            "GET",
            r"/v1/" + _P + r"/locations/global/services/(?P<s>[^/]+)/quotaInfos",
            "quota_infos",
            "cloudquotas.googleapis.com",
            "cloudquotas.quotas.get",
            "projects/{p}/locations/global/services/{s}",
        ),
        ("GET", r"/storage/v1/b/(?P<b>[^/]+)/iam", "storage_get_policy", "storage.googleapis.com", "storage.buckets.getIamPolicy", "projects/_/buckets/{b}"),
        ("PUT", r"/storage/v1/b/(?P<b>[^/]+)/iam", "storage_set_policy", "storage.googleapis.com", "storage.buckets.setIamPolicy", "projects/_/buckets/{b}"),
        (
            "POST",
            r"/v1/" + _P + r"/serviceAccounts/(?P<e>[^/:]+):getIamPolicy",
            "iam_sa_get_policy",
            "iam.googleapis.com",
            "iam.serviceAccounts.getIamPolicy",
            "projects/{p}/serviceAccounts/{e}",
        ),
        (
            "POST",
            r"/v1/" + _P + r"/serviceAccounts/(?P<e>[^/:]+):setIamPolicy",
            "iam_sa_set_policy",
            "iam.googleapis.com",
            "iam.serviceAccounts.setIamPolicy",
            "projects/{p}/serviceAccounts/{e}",
        ),
        (
            "POST",
            r"/v1/" + _P + r"/serviceAccounts/(?P<e>[^/:]+):testIamPermissions",
            "iam_sa_test_permissions",
            "iam.googleapis.com",
            "iam.serviceAccounts.get",
            "projects/{p}/serviceAccounts/{e}",
        ),
    ]
]
METHODS = ("GET", "POST", "DELETE", "PATCH", "PUT")
_SKUS = re.compile(r"/v1/services/(?P<s>[^/:]+)/skus\Z")
BILLING = "cloudbilling.googleapis.com"
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"


def _b64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class _Blank(dict[str, str]):
    """format_map source where a missing key (say, no nodeId in the query) renders empty."""

    def __missing__(self, key: str) -> str:
        return ""


class _Server(ThreadingHTTPServer):
    """Tracks open client connections so stop() can cut kept-alive ones (else they keep being answered)."""

    daemon_threads = True
    standin: GoogleStandin

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(address, handler)
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.connections_lock:
            self.connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.connections_lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up mid-reply (a reader refusing a huge page) is no error of the stand-in's."""
        if not isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            super().handle_error(request, client_address)

    def cut_connections(self) -> None:
        with self.connections_lock:
            open_now = list(self.connections)
        for connection in open_now:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class _Handler(BaseHTTPRequestHandler):
    """Reads one request, lets the stand-in answer, writes the reply (keep-alive, HTTP/1.1)."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # keep-alive + small replies otherwise wait ~40 ms on delayed ACKs
    timeout = 30  # idle keep-alive connections must not pin threads forever
    server: _Server

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length > 0 else b""
        standin = self.server.standin
        if standin.keeps_silent(self.command, self.path):
            return  # read, never answered: the connection closes when the stand-in stops
        status, payload = standin._respond(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, raw)
        path = urlsplit(self.path).path
        data = b" " * standin.faults.padding_of(self.command, path) + encode(payload)
        if standin.faults.trickles(self.command, path):
            self._trickle(status, data)
            return
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _trickle(self, status: int, data: bytes) -> None:
        """The whole reply, status line and headers too, a byte at a time (faults.trickle_every_s apart) until it is
        sent, the client hangs up or the stand-in stops."""
        standin = self.server.standin
        standin.held()
        head = f"{self.protocol_version} {status} {self.responses.get(status, ('',))[0]}\r\n"
        head += f"Content-Type: application/json; charset=UTF-8\r\nContent-Length: {len(data)}\r\n\r\n"
        for byte in head.encode() + data:
            if standin._stopping.wait(standin.faults.trickle_every_s):
                return
            self.wfile.write(bytes((byte,)))

    do_GET = do_POST = do_DELETE = do_PATCH = do_PUT = _serve

    def log_message(self, format: str, *args: Any) -> None:
        return


class GoogleStandin:
    """The stand-in: state, fault knobs and inspection helpers for tests, plus the HTTP server.

    Use as a context manager; it binds 127.0.0.1 on a free port.
    """

    def __init__(self, project: str = "tpuctl-test", seed: int = 0, project_number: int | None = None) -> None:
        rng = random.Random(seed)
        self.project = project
        self.seed = seed
        self.project_number: int = project_number or rng.randrange(10**11, 10**12)
        self.token = f"ya29.standin-{rng.getrandbits(128):032x}"
        self.refresh_token = f"1//standin-{rng.getrandbits(96):024x}"
        self.client_id = f"{rng.randrange(10**11, 10**12)}-standin.apps.googleusercontent.com"
        self.client_secret = f"GOCSPX-standin-{rng.getrandbits(64):016x}"
        self.create_delay_s = 0.2
        self.faults = Faults(seed=seed)
        self._lock = threading.RLock()
        self.tpu = TpuService(self, seed)
        self._requests: list[tuple[str, str, int]] = []
        self._service_accounts: dict[str, Any] = {}
        self.projects = ProjectApis(self)
        self.vertex = VertexService(self, seed)
        self.billing = BillingCatalog()
        self.api_key = f"AIzaSy-standin{rng.getrandbits(96):024x}"
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        # Called with (method, path) as each API request arrives, before it is served: a test's hook (a signal sent to
        # the client while its request is in flight, tests/integration/test_signals_cloud.py).
        self.on_request: Callable[[str, str], None] | None = None
        self.silent_prefixes: tuple[str, ...] = ()  # requests to these paths are read and never answered (silence())
        self.first_held_at: float | None = None  # time.monotonic() when the first request silence() or trickle() holds arrived
        self._stopping = threading.Event()

    # --- lifecycle ------------------------------------------------------------------------------

    def start(self) -> GoogleStandin:
        server = _Server(("127.0.0.1", 0), _Handler)
        server.standin = self
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="google-standin", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # the silent requests' threads end
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server.cut_connections()
            self._server = None

    def __enter__(self) -> GoogleStandin:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("the stand-in is not started")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    # --- test-facing helpers ---------------------------------------------------------------------

    def silence(self, *prefixes: str) -> None:
        """Requests whose path starts with one of `prefixes` (every API path but the token endpoint's when none is
        given) are accepted and read, and never answered: an endpoint that hangs rather than refuses."""
        self.silent_prefixes = prefixes or ("/v", "/storage/")

    def keeps_silent(self, method: str, target: str) -> bool:
        """Whether this request is one silence() holds: it is counted (status 0), then held until the stand-in stops."""
        if not self.silent_prefixes or not urlsplit(target).path.startswith(self.silent_prefixes):
            return False
        with self._lock:
            self._requests.append((method, target, 0))
        self.held()
        self._stopping.wait()
        return True

    def held(self) -> None:
        with self._lock:
            self.first_held_at = self.first_held_at or time.monotonic()

    def trickle(self, *prefixes: str, every_s: float = 0.5, methods: tuple[str, ...] = METHODS) -> None:
        """Replies to `methods` requests whose path starts with one of `prefixes` are sent a byte at a time, `every_s`
        apart, status line and headers included: an endpoint that answers, each byte inside a client's read timeout."""
        self.faults.trickled = tuple(f"{method} {prefix}" for method in methods for prefix in prefixes)
        self.faults.trickle_every_s = every_s

    def pad(self, *prefixes: str, size: int, methods: tuple[str, ...] = METHODS) -> None:
        """Replies to these requests start with `size` bytes of JSON whitespace: the API's JSON still, but larger than
        any reply a Google API sends."""
        self.faults.padded = tuple(f"{method} {prefix}" for method in methods for prefix in prefixes)
        self.faults.padding = size

    def endless_pages(self, *suffixes: str, same_token: bool = False, pages: int | None = None) -> None:
        """List replies (GET, a path ending in one of `suffixes`: "/nodes", "/locations", ...) always name a
        nextPageToken, a new one each page or (`same_token`) one page's again; after `pages` pages they end as usual."""
        self.faults.endless, self.faults.same_page_token, self.faults.endless_for = suffixes, same_token, pages

    @property
    def zones(self) -> list[str]:
        return list(self.tpu.zones)

    def set_zones(self, zones: list[str], accelerator_types: list[str] | None = None) -> None:
        """Replace the zones; every one offers the full catalogue (or `accelerator_types`) and all matching runtimes.

        Uniform zones keep benchmarks about listing and fan-out, not about which zone has which type.
        """
        types = tuple(accelerator_types) if accelerator_types else catalog.ALL_ACCELERATOR_TYPES
        with self._lock:
            self.tpu.zones = {z: catalog.full_offer(z, types) for z in zones}

    def hurry(self) -> None:
        """Every operation and state change still pending ends at the next request (a test's fast-forward)."""
        with self._lock:
            self.tpu.hurry()

    def preempt(self, zone: str, name: str) -> None:
        """The node turns PREEMPTED with no health, as the service does to spot/preemptible nodes."""
        with self._lock:
            self.tpu.advance()
            self.tpu.preempt(zone, name)

    def vanish(self, zone: str, name: str) -> None:
        """The node disappears, as the service deletes a preempted node some time later."""
        with self._lock:
            self.tpu.advance()
            self.tpu.vanish(zone, name)

    def set_node_state(self, zone: str, name: str, state: str, addresses: list[str] | None = None, health: str = "HEALTHY") -> None:
        """The service moves the node by itself (a repair, a restart after maintenance): READY comes
        back with `health`, any other state without; `addresses` are its hosts' new internal IPs."""
        with self._lock:
            self.tpu.advance()
            node = self.tpu.nodes[(zone, name)]
            node["state"] = state
            if state == "READY":
                node["health"] = health
            else:
                node.pop("health", None)
            for endpoint, address in zip(node["networkEndpoints"], addresses or [], strict=False):
                endpoint["ipAddress"] = address
            self.tpu.bump((zone, name))

    def add_ready_nodes(self, zone: str, count: int, prefix: str = "bench", accelerator_type: str | None = None, runtime: str | None = None) -> list[str]:
        """Create `count` READY nodes named PREFIX-0000.. directly (no API traffic); returns their ids."""
        names = [f"{prefix}-{i:04d}" for i in range(count)]
        with self._lock:
            for name in names:
                self.tpu.add_ready(zone, name, accelerator_type, runtime)
        return names

    def node(self, zone: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            self.tpu.advance()
            found = self.tpu.nodes.get((zone, name))
            return copy.deepcopy(found) if found else None

    def nodes(self, zone: str) -> list[dict[str, Any]]:
        with self._lock:
            self.tpu.advance()
            return [copy.deepcopy(n) for (z, _), n in sorted(self.tpu.nodes.items()) if z == zone]

    def queued_resource(self, zone: str, queued_id: str) -> dict[str, Any] | None:
        with self._lock:
            self.tpu.advance()
            record = self.tpu.queue.records.get((zone, queued_id))
            return copy.deepcopy(record.body) if record else None

    def iam_policy(self) -> dict[str, Any]:
        with self._lock:
            return copy.deepcopy(self.projects.policy)

    def set_iam_policy_externally(self, policy: Mapping[str, Any]) -> None:
        """Another admin's write: bindings (and version) replaced, etag bumped, whatever etag was passed."""
        with self._lock:
            self.projects.replace_policy(policy)

    def register_service_account(self, email: str, public_key: Any) -> None:
        """Trust a service account's key: its jwt-bearer assertions and self-signed JWTs are accepted."""
        with self._lock:
            self._service_accounts[email] = public_key

    @property
    def requests(self) -> list[tuple[str, str, int]]:
        with self._lock:
            return list(self._requests)

    def count(self, method: str, path_substring: str) -> int:
        return sum(1 for m, p, _ in self.requests if m == method and path_substring in p)

    # --- request handling ----------------------------------------------------------------------

    def _respond(self, method: str, target: str, headers: Mapping[str, str], raw: bytes) -> tuple[int, Any]:
        split = urlsplit(target)
        path = unquote(split.path)
        if path.startswith("/_standin/"):
            return self._control(path)
        if path == "/token":
            status, payload = self._token(method, raw)
        elif (skus := _SKUS.match(path)) is not None and method == "GET":
            status, payload = self._billing(skus["s"], dict(parse_qsl(split.query, keep_blank_values=True)), headers)
        else:
            if self.on_request is not None:
                self.on_request(method, path)
            status, payload = self._api(method, path, dict(parse_qsl(split.query, keep_blank_values=True)), headers, raw)
            start = self.faults.endless_start(method, path) if status == 200 else None
            if start is not None:  # each API's own token: Logging's names an offset in JSON, the others' a start (wire.page)
                token = json.dumps({"offset": start}) if path.endswith("entries:list") else str(start)
                payload = {**payload, "nextPageToken": base64.urlsafe_b64encode(token.encode()).decode()}
        with self._lock:
            self._requests.append((method, target, status))
        return status, payload

    def _control(self, path: str) -> tuple[int, Any]:
        """Read-only views for out-of-process inspection (never faulted, never logged)."""
        if path == "/_standin/health":
            return 200, {"ok": True}
        if path == "/_standin/requests":
            return 200, {"requests": [list(r) for r in self.requests]}
        return 404, {"error": {"code": 404, "message": f"no control path {path}", "status": "NOT_FOUND"}}

    def _api(self, method: str, path: str, query: dict[str, str], headers: Mapping[str, str], raw: bytes) -> tuple[int, JSON]:
        if self.faults.latency_s > 0:
            time.sleep(self.faults.latency_s)
        try:
            self._authenticate(headers.get("authorization", ""))
            decision = self.faults.decide()
            service = self._service_of(path)
            if decision is not None and not decision.after_effect:
                raise transient(decision.status, service, self.project_number)
            try:
                body = json.loads(raw) if raw.strip() else {}
            except ValueError:
                raise invalid("Invalid JSON payload received. Unexpected token.") from None
            with self._lock:
                self.tpu.advance()
                try:
                    # A copy: replies are serialised after the lock is released, while state may change.
                    result = copy.deepcopy(self._dispatch(method, path, query, body if isinstance(body, dict) else {}))
                except ApiError:
                    if decision is None:
                        raise
                    result = {}
            if decision is not None:
                raise transient(decision.status, service, self.project_number)
            if "enum-encoding=int" in query.get("$alt", ""):
                result = enums_as_numbers(result, None)
            return 200, result
        except ApiError as err:
            return err.code, err.body()

    def _billing(self, service: str, query: dict[str, str], headers: Mapping[str, str]) -> tuple[int, Any]:
        """The catalogue is public data: an API key (``key=``) or any valid bearer token reads it."""
        self.billing.stall()
        try:
            if query.get("key") != self.api_key:
                if "key" in query:
                    raise ApiError(400, "API key not valid. Please pass a valid API key.", "INVALID_ARGUMENT")
                self._authenticate(headers.get("authorization", ""))
            if BILLING in self.faults.disabled_apis:
                raise service_disabled(BILLING, "Cloud Billing API", self.project_number)
            decision = self.faults.decide()  # a read: failing before or after its effect is the same
            if decision is not None:
                raise transient(decision.status, BILLING, self.project_number)
        except ApiError as err:
            return err.code, err.body()
        with self._lock:
            return self.billing.list_skus(service, query)

    def _authenticate(self, header: str) -> None:
        scheme, _, credential = header.partition(" ")
        if scheme.lower() != "bearer" or not credential:
            raise unauthenticated()
        if credential.strip() == self.token:
            return
        if self._verify_jwt(credential.strip()) is None:
            raise unauthenticated()

    @staticmethod
    def _service_of(path: str) -> str:
        if path.startswith(("/v2/", "/v2alpha1/")):
            return "tpu.googleapis.com"
        if path.startswith("/v1beta1/") or "/services/" in path:
            return "serviceusage.googleapis.com"
        if path.endswith(":getConfig"):
            return "ml.googleapis.com"
        return "cloudresourcemanager.googleapis.com"

    def _dispatch(self, method: str, path: str, query: dict[str, str], body: JSON) -> JSON:
        self.vertex.advance()
        # Vertex custom jobs and Logging's /v2/entries:list first: the TPU service claims every other /v2/ path.
        vertex = self.vertex.route(method, path, body)
        if vertex is not None:
            vertex_handler, vertex_params, gates = vertex
            for project, service, permission, resource in gates:
                self._gate(project, service, permission, resource, vertex_params)
            return self.vertex.handle(vertex_handler, vertex_params, query, body)
        if path.startswith(("/v2/", "/v2alpha1/")):
            version, _, rest = path[1:].partition("/")
            found = self.tpu.route(method, rest, version)
            if found is None:
                raise ApiError(404, f"Method not found: {method} {path}", "NOT_FOUND")
            handler, params, permission, resource = found
            self._gate(params["p"], "tpu.googleapis.com", permission, resource.format_map(_Blank({**query, **params})), params)
            return self.tpu.handle(handler, params, query, body)
        for m, pattern, handler, service, permission, resource in _OTHER_ROUTES:
            match = pattern.match(path)
            if match and m == method:
                params = match.groupdict()
                self._gate(params.get("p") or self.project, service, permission, resource.format_map(_Blank(params)), params)
                result: JSON = getattr(self.projects, handler)(params, query, body)
                return result
        raise ApiError(404, f"Method not found: {method} {path}", "NOT_FOUND")

    def _gate(self, project: str, service: str, permission: str, resource: str, params: dict[str, str]) -> None:
        """Checks in Google's order: project exists, API enabled, caller has the permission."""
        if project not in (self.project, str(self.project_number)):
            raise unknown_project(project, service)
        if service in self.faults.disabled_apis:
            raise service_disabled(service, SERVICE_TITLES.get(service, service), self.project_number)
        if permission in self.faults.denied_permissions:
            raise permission_denied(permission, resource.replace(f"projects/{project}", f"projects/{self.project}"), service)

    # --- OAuth ---------------------------------------------------------------------------------

    def _token(self, method: str, raw: bytes) -> tuple[int, JSON]:
        """Google's token endpoint: form-encoded grants in, a bearer token (or an OAuth error) out."""

        def refused(error: str, description: str) -> tuple[int, JSON]:
            return 400, {"error": error, "error_description": description}

        if method != "POST":
            return 405, {"error": "invalid_request", "error_description": "Only POST is supported."}
        form = {k: v[0] for k, v in parse_qs(raw.decode("utf-8", "replace")).items()}
        grant = form.get("grant_type", "")
        if grant == "refresh_token":
            if not form.get("client_id") or not form.get("client_secret"):
                return 401, {"error": "invalid_client", "error_description": "The OAuth client was not found."}
            if form.get("refresh_token") != self.refresh_token:
                return refused("invalid_grant", "Token has been expired or revoked.")
        elif grant == JWT_BEARER:
            claims = self._verify_jwt(form.get("assertion", ""))
            if claims is None:
                return refused("invalid_grant", "Invalid JWT Signature.")
            if not claims.get("scope") and not claims.get("target_audience"):
                return refused("invalid_scope", "Empty or missing scope not allowed.")
        else:
            return refused("unsupported_grant_type", f"Invalid grant_type: {grant}")
        return 200, {
            "access_token": self.token,
            "expires_in": 3599,
            "token_type": "Bearer",
            "scope": "https://www.googleapis.com/auth/cloud-platform",
        }

    def _verify_jwt(self, token: str) -> JSON | None:
        """Claims of an RS256 JWT signed by a registered service-account key and not expired, else None."""
        parts = token.split(".")
        if len(parts) != 3:
            return None
        try:
            header = json.loads(_b64url(parts[0]))
            claims = json.loads(_b64url(parts[1]))
            signature = _b64url(parts[2])
        except ValueError:
            return None
        if not isinstance(claims, dict) or header.get("alg") != "RS256":
            return None
        with self._lock:
            key = self._service_accounts.get(str(claims.get("iss")))
        if key is None:
            return None
        try:
            from cryptography.exceptions import InvalidSignature
            from cryptography.hazmat.primitives import hashes
            from cryptography.hazmat.primitives.asymmetric import padding
        except ImportError:  # pragma: no cover - cryptography ships with the test environment
            pass
        else:
            try:
                key.verify(signature, f"{parts[0]}.{parts[1]}".encode(), padding.PKCS1v15(), hashes.SHA256())
            except InvalidSignature:
                return None
        now = time.time()
        if not isinstance(claims.get("exp"), (int, float)) or claims["exp"] < now or claims.get("iat", now) > now + 300:
            return None
        return claims
