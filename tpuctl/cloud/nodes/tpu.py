"""The one Cloud TPU v2 API client: reads and deletes over plain HTTP, other changes through google-cloud-tpu.

Reads (nodes, operations, queued resources, zones, accelerator types, runtime
versions) are GETs whose JSON reply is already the shape tpuctl works with
(`Node.resource`, and exactly what `--json` prints), so they go over the
standard library: importing google-cloud-tpu costs about 0.3 s, more than a
whole `tpuctl list` may take (benchmarks/list_nodes.py: a quarter of gcloud's
time). Deletes, whose reply is an operation of which only the name is used, go
the same way. Other changes (create, stop, start, queued resources, the service
identity) go through google-cloud-tpu's REST transport, imported only then;
its requests are built from the same JSON with `from_json`, so no caller ever
holds a proto. Both halves raise google-api-core's exceptions, every call is
retried on transient failures, and every failure leaves through the one
mapper, `api_errors.explain`, as a TpuctlError naming project, zone and
permission.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlencode, urlsplit

from tpuctl import __version__
from tpuctl.cloud.nodes.node import JSON, Node, mapping
from tpuctl.cloud.plumbing import retry
from tpuctl.cloud.plumbing.api_errors import Where, error_from_reply, guarded, names_location
from tpuctl.inputs.errors import FAILED, TpuctlError
from tpuctl.settings.cloud import BY_KEY, Settings

if TYPE_CHECKING:
    from google.cloud import tpu_v2

    from tpuctl.cloud.auth.credentials import Identity

_CLIENT_IMPORT = threading.Lock()  # client_module's first import
ALPHA = "v2alpha1"  # flex-start only: the one API version with a queued resource's provisioningModel and runDuration


@dataclass(frozen=True)
class Operation:
    """A long-running operation as far as a wait needs it: finished or not, and why it failed."""

    done: bool
    error_code: int = 0  # google.rpc.Code; 0 while running or when it succeeded
    error_message: str = ""

    @property
    def failed(self) -> bool:
        return self.done and self.error_code != 0


@dataclass(frozen=True)
class Queued:
    """A queued resource as far as a wait, a delete and `list` need it: its state and, once FAILED, the error that
    ended it; the nodes it asks for (a node's `queuedResource` names it, but a SUSPENDED one has no node left)."""

    state: str
    error_code: int = 0  # google.rpc.Code of QueuedResourceState.failedData.error
    error_message: str = ""
    resource_id: str = ""
    node_ids: tuple[str, ...] = ()  # tpu.nodeSpec[].nodeId (a multi-node request names a prefix instead: not listed)
    accelerator_type: str = ""

    @classmethod
    def of(cls, found: Mapping[str, Any]) -> Queued:
        state = mapping(found.get("state"))
        error = mapping(mapping(state.get("failedData")).get("error"))
        specs = mapping(found.get("tpu")).get("nodeSpec")
        specs = [mapping(spec) for spec in specs] if isinstance(specs, list) else []
        return cls(
            str(state.get("state") or "STATE_UNSPECIFIED"),
            int(error.get("code", 0) or 0),
            str(error.get("message", "")),
            str(found.get("name", "")).rsplit("/", 1)[-1],
            tuple(str(spec["nodeId"]) for spec in specs if spec.get("nodeId")),
            next((str(mapping(spec.get("node")).get("acceleratorType", "")) for spec in specs), ""),
        )


class NodeApi(Protocol):
    """What the lifecycle and babysit code need from the TPU API (TpuApi; a fake in tests)."""

    project: str

    def get_node(self, zone: str, name: str) -> Node | None: ...
    def create_node(self, zone: str, name: str, resource: JSON) -> str | None: ...
    def delete_node(self, zone: str, name: str) -> str | None: ...
    def stop_node(self, zone: str, name: str) -> str | None: ...
    def start_node(self, zone: str, name: str) -> str | None: ...
    def operation(self, zone: str, name: str) -> Operation: ...
    def create_queued(self, zone: str, resource_id: str, resource: JSON) -> bool: ...
    def get_queued(self, zone: str, resource_id: str) -> Queued | None: ...
    def delete_queued(self, zone: str, resource_id: str) -> None: ...
    def list_queued(self, zone: str) -> list[Queued]: ...


class TpuApi:
    def __init__(self, settings: Settings, identity: Identity | None = None) -> None:
        """identity: credentials already loaded (by `tpuctl auth`); otherwise loaded from settings when needed."""
        self.settings = settings
        self.project = settings.require("project")
        self.endpoint = settings.require("tpu-endpoint").rstrip("/")
        self._parts = urlsplit(self.endpoint)
        self._lock = threading.Lock()
        self._identity = identity
        self._token_file_token: str | None = None
        self._client: tpu_v2.TpuClient | None = None

    @classmethod
    def connect(cls, settings: Settings) -> TpuApi:
        """A client whose credentials were checked once up front, so a bad login is one line before any API work."""
        api = cls(settings)
        api._token()
        return api

    def parent(self, zone: str) -> str:
        return f"projects/{self.project}/locations/{zone}"

    def node_path(self, zone: str, name: str) -> str:
        return f"{self.parent(zone)}/nodes/{name}"

    def _where(self, action: str, zone: str | None, permission: str) -> Where:
        return Where(action, self.project, zone, permission)

    # Credentials: a token file needs no Google library; anything else is google-auth's, refreshed when stale.

    def bearer_token(self) -> str:
        """The token this client sends, for a read of another API with the same credentials (the price catalogue)."""
        return self._token()

    def _token(self) -> str:
        with self._lock:
            if self._identity is None and self.settings.get("access-token-file"):
                if self._token_file_token is None:
                    from tpuctl.cloud.auth.credentials import bearer_token

                    self._token_file_token = bearer_token(self.settings)
                return self._token_file_token
            from tpuctl.cloud.auth.credentials import check_token

            identity = self._credentials()
            check_token(identity)  # a refresh only when the token expired: babysit runs for days
            return str(identity.credentials.token)

    def _credentials(self) -> Identity:
        if self._identity is None:
            from tpuctl.cloud.auth.credentials import load

            self._identity = load(self.settings)
        return self._identity

    # Reads: stdlib HTTP, the API's JSON.

    def _timeout(self) -> float:
        """A request's timeout: retry.REQUEST_S, or what is left of the command's deadline (tpuctl/cloud/plumbing/retry.py) if less."""
        return retry.timeout(retry.REQUEST_S, self.endpoint)

    def _get(self, path: str, query: dict[str, str] | None = None, version: str = "v2") -> JSON:
        return self._call("GET", path, query, None, version)

    def _call(self, method: str, path: str, query: dict[str, str] | None, body: JSON | None, version: str) -> JSON:
        """One plain HTTP call to the TPU API (`version`: v2, or v2alpha1 for what only it has), its JSON reply."""
        connection = retry.connection(self._parts, self._timeout())  # its reply read whole within that time, at most MAX_REPLY_BYTES
        target = f"{self._parts.path}/{version}/{path}" + (f"?{urlencode(query)}" if query else "")
        headers = {"Authorization": f"Bearer {self._token()}", "Accept": "application/json", "User-Agent": f"tpuctl/{__version__}"}
        payload = None if body is None else json.dumps(body).encode()
        if payload is not None:
            headers["Content-Type"] = "application/json"
        try:
            connection.request(method, target, body=payload, headers=headers)
            response = connection.getresponse()
            reply_body = response.read()
        finally:
            connection.close()
        if response.status >= 400:
            raise error_from_reply(response.status, reply_body, method, f"{self.endpoint}/{version}/{path}")
        try:
            reply = json.loads(reply_body) if reply_body else {}
        except ValueError:
            raise TpuctlError(f"the TPU API at {self.endpoint} did not answer with JSON", exit_code=FAILED) from None
        return reply if isinstance(reply, dict) else {}

    def _pages(self, path: str, key: str, version: str = "v2") -> list[JSON]:
        """Every item of a listing, page after page (retry.pages: a listing that never ends is one line)."""
        items: list[JSON] = []
        for reply in retry.pages(lambda token: self._get(path, {"pageToken": token} if token else None, version), f"the TPU API at {self.endpoint}"):
            found = reply.get(key, [])
            items += found if isinstance(found, list) else []
        return items

    def _get_or_none(self, path: str, where: Where) -> JSON | None:
        """The resource, or None when it does not exist; a 404 about the zone itself stays an error."""
        from google.api_core import exceptions as api

        try:
            return self._get(path)
        except api.NotFound as exc:
            if names_location(exc, where):
                raise
            return None

    def zones(self) -> list[str]:
        where = self._where("list zones", None, "tpu.locations.list")
        found = guarded(lambda: self._pages(f"projects/{self.project}/locations", "locations"), where)
        return sorted(str(location.get("locationId", "")) for location in found)

    def accelerator_types(self, zone: str) -> list[JSON]:
        where = self._where("list accelerator types", zone, "tpu.acceleratortypes.list")
        found = guarded(lambda: self._pages(f"{self.parent(zone)}/acceleratorTypes", "acceleratorTypes"), where)
        return sorted(found, key=lambda a: _type_order(str(a.get("type", ""))))

    def runtime_versions(self, zone: str) -> list[str]:
        where = self._where("list runtime versions", zone, "tpu.runtimeversions.list")
        found = guarded(lambda: self._pages(f"{self.parent(zone)}/runtimeVersions", "runtimeVersions"), where)
        return sorted(str(r.get("version", "")) for r in found)

    def list_nodes(self, zone: str) -> list[Node]:
        """The zone's nodes, by name."""
        where = self._where("list nodes", zone, "tpu.nodes.list")
        found = guarded(lambda: self._pages(f"{self.parent(zone)}/nodes", "nodes"), where)
        return sorted((Node(resource, zone) for resource in found), key=lambda node: node.name)

    def get_node(self, zone: str, name: str) -> Node | None:
        """The node, or None when there is none of that name (a normal answer for idempotent commands)."""
        where = self._where(f"get node {name}", zone, "tpu.nodes.get")
        found = guarded(lambda: self._get_or_none(self.node_path(zone, name), where), where)
        return None if found is None else Node(found, zone)

    def operation(self, zone: str, name: str) -> Operation:
        where = self._where("poll an operation", zone, "tpu.operations.get")
        reply = guarded(lambda: self._get(name), where)
        error = mapping(reply.get("error"))
        return Operation(bool(reply.get("done")), int(error.get("code", 0) or 0), str(error.get("message", "")))

    def get_queued(self, zone: str, resource_id: str) -> Queued | None:
        """The queued resource's state (`WAITING_FOR_RESOURCES`, `ACTIVE`, …, and why it FAILED), or None when there is none."""
        where = self._where(f"get queued resource {resource_id}", zone, "tpu.queuedresources.get")
        found = guarded(lambda: self._get_or_none(f"{self.parent(zone)}/queuedResources/{resource_id}", where), where)
        return None if found is None else Queued.of(found)

    def list_queued(self, zone: str) -> list[Queued]:
        """The zone's queued resources (v2): what `list` shows of one that outlived its node."""
        where = self._where("list queued resources", zone, "tpu.queuedresources.list")
        return [Queued.of(mapping(q)) for q in guarded(lambda: self._pages(f"{self.parent(zone)}/queuedResources", "queuedResources"), where)]

    def flex_start_queued(self, zone: str) -> set[str]:
        """The names of the zone's flex-start queued resources: only v2alpha1 shows a queued resource's
        provisioningModel, and a v2 Node of one looks on-demand (`list` and `describe` name the kind from this)."""
        where = self._where("list queued resources", zone, "tpu.queuedresources.list")
        found = guarded(lambda: self._pages(f"{self.parent(zone)}/queuedResources", "queuedResources", ALPHA), where)
        return {str(q.get("name", "")) for q in found if q.get("provisioningModel") == "FLEX_START"}

    def alpha_node(self, zone: str, name: str) -> Node | None:
        """The node as v2alpha1 shows it, with what v2 leaves out (SchedulingConfig.terminationTimestamp)."""
        from google.api_core import exceptions as api

        where = self._where(f"get node {name}", zone, "tpu.nodes.get")

        def read() -> JSON | None:
            try:
                return self._get(self.node_path(zone, name), None, ALPHA)
            except api.NotFound:
                return None

        found = guarded(read, where)
        return None if found is None else Node(found, zone)

    # Changes: google-cloud-tpu, imported on first use.

    def _google(self) -> tpu_v2.TpuClient:
        if self._client is None:
            client = client_module()
            default = BY_KEY["tpu-endpoint"].default
            options = None if self.settings.get("tpu-endpoint") == default else {"api_endpoint": self.endpoint}
            self._client = client.TpuClient(transport="rest", client_options=options, credentials=self._credentials().credentials)
            retry.bounded(self._client.transport._session)  # type: ignore[union-attr]  # the REST transport's AuthorizedSession (transports/rest.py)
        return self._client

    def service_identity(self, zone: str) -> str:
        """The TPU service agent's email; the call also creates the agent the first time."""
        request = client_module().GenerateServiceIdentityRequest(parent=self.parent(zone))
        where = self._where("generate the TPU service identity", zone, "tpu.locations.generateServiceIdentity")
        reply = guarded(lambda: self._google().generate_service_identity(request=request, timeout=self._timeout()), where)
        return str(reply.identity.email)

    def create_node(self, zone: str, name: str, resource: JSON) -> str | None:
        """Start creating; the operation's name, or None when a node of that name already exists.

        A create whose reply was lost is retried and then meets its own node as
        409: the caller compares specs either way, so nothing is created twice.
        """
        from google.api_core import exceptions as api

        node = client_module().Node.from_json(json.dumps(resource))
        where = self._where(f"create node {name}", zone, "tpu.nodes.create")

        def create() -> str | None:
            try:
                return str(self._google().create_node(parent=self.parent(zone), node_id=name, node=node, timeout=self._timeout()).operation.name)
            except api.Conflict:
                return None

        return guarded(create, where)

    def delete_node(self, zone: str, name: str) -> str | None:
        """Start deleting: the operation's name, "" when already being deleted, None when already gone.

        Plain HTTP, as the reads: the reply is an Operation whose name is all a delete needs, and google-cloud-tpu's
        parse of it fails with TypeError when the operation comes back without a typed `response` (after the
        DELETE went out, so a loop of deletes stopped there)."""
        from google.api_core import exceptions as api

        where = self._where(f"delete node {name}", zone, "tpu.nodes.delete")

        def delete() -> str | None:
            try:
                return str(self._call("DELETE", self.node_path(zone, name), None, None, "v2").get("name", ""))
            except api.NotFound as exc:
                if names_location(exc, where):
                    raise
                return None
            except api.BadRequest:
                # Our own earlier attempt (a lost reply) may already be deleting it.
                if self._state_now(zone, name, where) == "DELETING":
                    return ""
                raise

        return guarded(delete, where)

    def stop_node(self, zone: str, name: str) -> str | None:
        """The operation's name, or None when the node is already stopping (a retried, lost reply)."""
        return self._power(zone, name, "stop", ("STOPPING", "STOPPED"))

    def start_node(self, zone: str, name: str) -> str | None:
        """The operation's name, or None when the node is already starting (a retried, lost reply)."""
        return self._power(zone, name, "start", ("STARTING", "READY"))

    def _power(self, zone: str, name: str, verb: str, moving: tuple[str, ...]) -> str | None:
        from google.api_core import exceptions as api

        where = self._where(f"{verb} node {name}", zone, f"tpu.nodes.{verb}")

        def call() -> str | None:
            client = self._google()
            method = client.stop_node if verb == "stop" else client.start_node
            try:
                return str(method(request={"name": self.node_path(zone, name)}, timeout=self._timeout()).operation.name)
            except api.BadRequest:
                if self._state_now(zone, name, where) in moving:
                    return None
                raise

        return guarded(call, where)

    def _state_now(self, zone: str, name: str, where: Where) -> str | None:
        """One unretried look at a node's state, inside a call that the retry loop already covers."""
        found = self._get_or_none(self.node_path(zone, name), where)
        return None if found is None else Node(found, zone).state

    def create_queued(self, zone: str, resource_id: str, resource: JSON) -> bool:
        """Queue a request for a node; False when a queued resource of that id already exists.

        A flex-start request (`provisioningModel`, `runDuration`: v2alpha1 only) is POSTed to v2alpha1 over plain
        HTTP: google-cloud-tpu's tpu_v2alpha1 (1.28) has neither field, and its from_json would refuse them."""
        from google.api_core import exceptions as api

        where = self._where(f"queue resource {resource_id}", zone, "tpu.queuedresources.create")
        alpha = "provisioningModel" in resource or "runDuration" in resource

        def create() -> bool:
            try:
                if alpha:
                    self._call("POST", f"{self.parent(zone)}/queuedResources", {"queuedResourceId": resource_id}, resource, ALPHA)
                else:
                    self._google().create_queued_resource(
                        parent=self.parent(zone), queued_resource_id=resource_id, queued_resource=_v2_queued(resource), timeout=self._timeout()
                    )
                return True
            except api.Conflict:
                return False

        return guarded(create, where)

    def delete_queued(self, zone: str, resource_id: str) -> None:
        """Start deleting the queued resource and, `force`, the nodes it made (plain HTTP, as delete_node)."""
        from google.api_core import exceptions as api

        where = self._where(f"delete queued resource {resource_id}", zone, "tpu.queuedresources.delete")
        path = f"{self.parent(zone)}/queuedResources/{resource_id}"

        def delete() -> None:
            try:
                self._call("DELETE", path, {"force": "true"}, None, "v2")
            except api.NotFound as exc:
                if names_location(exc, where):
                    raise
                return

        guarded(delete, where)


def _type_order(name: str) -> tuple[str, int]:
    """v4-8 before v4-16 before v4-128: by family, then by size."""
    family, _, size = name.rpartition("-")
    return (family, int(size) if size.isdigit() else 0)


def _v2_queued(resource: JSON) -> tpu_v2.QueuedResource:
    queued: tpu_v2.QueuedResource = client_module().QueuedResource.from_json(json.dumps(resource))
    return queued


def client_module() -> ModuleType:
    """google-cloud-tpu, imported as where google-auth's optional aiohttp extra is absent.

    google-api-core's operations package imports its asyncio REST transport
    when it can, and with aiohttp installed (gcsfs, for one, brings it) that
    pulls in aiohttp: 0.15-0.2 CPU-s of the
    0.5 s the client's import costs every create, delete, stop and start.
    tpuctl uses the synchronous REST transport only, and api-core skips the
    asyncio one when its import fails (operations_v1/transports/__init__.py),
    so aiohttp is hidden for the import alone and stays importable after it.
    """
    loaded = sys.modules.get("google.cloud.tpu_v2")
    if loaded is not None:
        return loaded
    with _CLIENT_IMPORT:  # threads (a hunt's zones) that meet the first import see aiohttp hidden once, restored once
        hide = "aiohttp" not in sys.modules
        if hide:
            sys.modules["aiohttp"] = None  # type: ignore[assignment]  # import of aiohttp halted: ModuleNotFoundError
        try:
            from google.cloud import tpu_v2
        finally:
            if hide:
                del sys.modules["aiohttp"]
    return tpu_v2

