"""The Cloud TPU v2 API through google-cloud-tpu's REST transport.

Every call is retried on transient failures and every failure leaves as a
TpuctlError that names the project, zone and permission involved. REST rather
than gRPC: it needs no HTTP/2 channel, honours an `http://` endpoint override
(how tests and private endpoints reach it) and starts faster.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from tpuctl.cloud.api_errors import Where, guarded, names_location
from tpuctl.cloud.credentials import Identity
from tpuctl.settings import BY_KEY, Settings

if TYPE_CHECKING:
    from google.cloud import tpu_v2
    from google.longrunning import operations_pb2

T = TypeVar("T")
TIMEOUT_S = 60.0


class TpuApi:
    def __init__(self, identity: Identity, settings: Settings) -> None:
        from google.cloud import tpu_v2

        endpoint = settings.get("tpu-endpoint")
        options = None if endpoint == BY_KEY["tpu-endpoint"].default else {"api_endpoint": endpoint}
        self.client = tpu_v2.TpuClient(transport="rest", client_options=options, credentials=identity.credentials)
        self.project = settings.project

    def parent(self, zone: str) -> str:
        return f"projects/{self.project}/locations/{zone}"

    def node_path(self, zone: str, name: str) -> str:
        return f"{self.parent(zone)}/nodes/{name}"

    def _call(self, fn: Callable[[], T], where: Where) -> T:
        return guarded(fn, where)

    def _where(self, action: str, zone: str | None, permission: str) -> Where:
        return Where(action, self.project, zone, permission)

    def service_identity(self, zone: str) -> str:
        """The TPU service agent's email; the call also creates the agent the first time."""
        from google.cloud import tpu_v2

        request = tpu_v2.GenerateServiceIdentityRequest(parent=self.parent(zone))
        where = self._where("generate the TPU service identity", zone, "tpu.locations.generateServiceIdentity")
        reply = self._call(lambda: self.client.generate_service_identity(request=request, timeout=TIMEOUT_S), where)
        return str(reply.identity.email)

    # Nodes

    def get_node(self, zone: str, name: str) -> tpu_v2.Node | None:
        """The node, or None when it does not exist (a normal answer for idempotent commands)."""
        from google.api_core import exceptions as api

        where = self._where(f"get node {name}", zone, "tpu.nodes.get")

        def get() -> tpu_v2.Node | None:
            try:
                return self.client.get_node(name=self.node_path(zone, name), timeout=TIMEOUT_S)
            except api.NotFound as exc:
                if names_location(exc, where):
                    raise
                return None

        return self._call(get, where)

    def list_nodes(self, zone: str) -> list[tpu_v2.Node]:
        where = self._where("list nodes", zone, "tpu.nodes.list")
        return self._call(lambda: list(self.client.list_nodes(parent=self.parent(zone), timeout=TIMEOUT_S)), where)

    def create_node(self, zone: str, name: str, node: tpu_v2.Node) -> str | None:
        """Start creating; the operation's name, or None when a node of that name already exists.

        A create whose reply was lost is retried and then meets its own node as
        409: the caller compares specs either way, so nothing is created twice.
        """
        from google.api_core import exceptions as api

        where = self._where(f"create node {name}", zone, "tpu.nodes.create")

        def create() -> str | None:
            try:
                return str(self.client.create_node(parent=self.parent(zone), node_id=name, node=node, timeout=TIMEOUT_S).operation.name)
            except api.Conflict:
                return None

        return self._call(create, where)

    def delete_node(self, zone: str, name: str) -> str | None:
        """Start deleting: the operation's name, "" when already being deleted, None when already gone."""
        from google.api_core import exceptions as api

        where = self._where(f"delete node {name}", zone, "tpu.nodes.delete")

        def delete() -> str | None:
            try:
                return str(self.client.delete_node(name=self.node_path(zone, name), timeout=TIMEOUT_S).operation.name)
            except api.NotFound as exc:
                if names_location(exc, where):
                    raise
                return None
            except api.BadRequest:
                # Our own earlier attempt (a lost reply) may already be deleting it.
                if self._state_now(zone, name) == "DELETING":
                    return ""
                raise

        return self._call(delete, where)

    def stop_node(self, zone: str, name: str) -> str | None:
        """The operation's name, or None when the node is already stopping (a retried, lost reply)."""
        return self._power(zone, name, "stop", ("STOPPING", "STOPPED"))

    def start_node(self, zone: str, name: str) -> str | None:
        """The operation's name, or None when the node is already starting (a retried, lost reply)."""
        return self._power(zone, name, "start", ("STARTING", "READY"))

    def _power(self, zone: str, name: str, verb: str, moving: tuple[str, ...]) -> str | None:
        from google.api_core import exceptions as api

        where = self._where(f"{verb} node {name}", zone, f"tpu.nodes.{verb}")
        method = self.client.stop_node if verb == "stop" else self.client.start_node

        def call() -> str | None:
            try:
                return str(method(request={"name": self.node_path(zone, name)}, timeout=TIMEOUT_S).operation.name)
            except api.BadRequest:
                if self._state_now(zone, name) in moving:
                    return None
                raise

        return self._call(call, where)

    def _state_now(self, zone: str, name: str) -> str | None:
        """One unretried look at a node's state, inside a call that the retry loop already covers."""
        from google.api_core import exceptions as api

        try:
            return str(self.client.get_node(name=self.node_path(zone, name), timeout=TIMEOUT_S).state.name)
        except api.NotFound:
            return None

    def operation(self, zone: str, name: str) -> operations_pb2.Operation:
        where = self._where("poll an operation", zone, "tpu.operations.get")
        return self._call(lambda: self.client.get_operation({"name": name}, timeout=TIMEOUT_S), where)

    # Queued resources

    def create_queued(self, zone: str, resource_id: str, resource: tpu_v2.QueuedResource) -> bool:
        """Queue a request for a node; False when a queued resource of that id already exists."""
        from google.api_core import exceptions as api

        where = self._where(f"queue resource {resource_id}", zone, "tpu.queuedresources.create")

        def create() -> bool:
            try:
                self.client.create_queued_resource(
                    parent=self.parent(zone), queued_resource_id=resource_id, queued_resource=resource, timeout=TIMEOUT_S
                )
                return True
            except api.Conflict:
                return False

        return self._call(create, where)

    def get_queued(self, zone: str, resource_id: str) -> tpu_v2.QueuedResource | None:
        from google.api_core import exceptions as api

        where = self._where(f"get queued resource {resource_id}", zone, "tpu.queuedresources.get")

        def get() -> tpu_v2.QueuedResource | None:
            try:
                return self.client.get_queued_resource(name=f"{self.parent(zone)}/queuedResources/{resource_id}", timeout=TIMEOUT_S)
            except api.NotFound:
                return None

        return self._call(get, where)

    def delete_queued(self, zone: str, resource_id: str) -> None:
        from google.api_core import exceptions as api

        where = self._where(f"delete queued resource {resource_id}", zone, "tpu.queuedresources.delete")

        def delete() -> None:
            try:
                self.client.delete_queued_resource(
                    request={"name": f"{self.parent(zone)}/queuedResources/{resource_id}", "force": True}, timeout=TIMEOUT_S
                )
            except api.NotFound:
                return

        self._call(delete, where)
