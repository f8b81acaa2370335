"""Cloud TPU API v2 (tpu.googleapis.com/v2) as the stand-in serves it.

State changes that take time on Google (CREATING -> READY, STOPPING ->
STOPPED, a queued resource moving through its queue) are timed events on a
monotonic clock, applied whenever the service is touched (every request and
every inspection from a test). No background thread changes state, so what a
test observes depends only on elapsed time and the requests made.
"""

from __future__ import annotations

import heapq
import itertools
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from tests.standins import catalog
from tests.standins.tpu_queued import QueuedResources
from tests.standins.wire import (
    JSON,
    NODE,
    RPC_CODES,
    ApiError,
    already_exists,
    failed_precondition,
    invalid,
    normalize,
    not_found,
    page,
    rfc3339,
)

if TYPE_CHECKING:
    from tests.standins.google_apis import GoogleStandin

OPERATION_METADATA = "type.googleapis.com/google.cloud.tpu.v2.OperationMetadata"
NODE_TYPE = "type.googleapis.com/google.cloud.tpu.v2.Node"
EMPTY_TYPE = "type.googleapis.com/google.protobuf.Empty"

LOCATIONS_PAGE_SIZE = 50  # the stand-in's choice: under the catalogue's 9 zones, one page; a project of 250, five
NODE_ID = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?\Z")
LABEL_KEY = re.compile(r"[a-z][a-z0-9_-]{0,62}\Z")
LABEL_VALUE = re.compile(r"[a-z0-9_-]{0,63}\Z")
CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"

_P = r"projects/(?P<p>[^/:]+)"
_Z = _P + r"/locations/(?P<z>[^/:]+)"
# (HTTP method, path after /v2/, handler name, IAM permission, resource the permission is checked on)
ROUTES: list[tuple[str, re.Pattern[str], str, str, str]] = [
    (m, re.compile(rx + r"\Z"), h, perm, res)
    for m, rx, h, perm, res in [
        ("GET", _P + r"/locations", "list_locations", "tpu.locations.list", "projects/{p}"),
        ("GET", _Z, "get_location", "tpu.locations.get", "projects/{p}/locations/{z}"),
        (
            "POST",
            _Z + r":generateServiceIdentity",
            "generate_service_identity",
            "tpu.locations.generateServiceIdentity",
            "projects/{p}/locations/{z}",
        ),
        ("GET", _Z + r"/nodes", "list_nodes", "tpu.nodes.list", "projects/{p}/locations/{z}"),
        ("POST", _Z + r"/nodes", "create_node", "tpu.nodes.create", "projects/{p}/locations/{z}/nodes/{nodeId}"),
        ("GET", _Z + r"/nodes/(?P<n>[^/:]+)", "get_node", "tpu.nodes.get", "projects/{p}/locations/{z}/nodes/{n}"),
        ("DELETE", _Z + r"/nodes/(?P<n>[^/:]+)", "delete_node", "tpu.nodes.delete", "projects/{p}/locations/{z}/nodes/{n}"),
        ("POST", _Z + r"/nodes/(?P<n>[^/:]+):stop", "stop_node", "tpu.nodes.stop", "projects/{p}/locations/{z}/nodes/{n}"),
        ("POST", _Z + r"/nodes/(?P<n>[^/:]+):start", "start_node", "tpu.nodes.start", "projects/{p}/locations/{z}/nodes/{n}"),
        ("GET", _Z + r"/operations", "list_operations", "tpu.operations.list", "projects/{p}/locations/{z}"),
        ("GET", _Z + r"/operations/(?P<o>[^/:]+)", "get_operation", "tpu.operations.get", "projects/{p}/locations/{z}/operations/{o}"),
        ("GET", _Z + r"/acceleratorTypes", "list_accelerator_types", "tpu.acceleratortypes.list", "projects/{p}/locations/{z}"),
        (
            "GET",
            _Z + r"/acceleratorTypes/(?P<t>[^/:]+)",
            "get_accelerator_type",
            "tpu.acceleratortypes.get",
            "projects/{p}/locations/{z}/acceleratorTypes/{t}",
        ),
        ("GET", _Z + r"/runtimeVersions", "list_runtime_versions", "tpu.runtimeversions.list", "projects/{p}/locations/{z}"),
        (
            "GET",
            _Z + r"/runtimeVersions/(?P<v>[^/:]+)",
            "get_runtime_version",
            "tpu.runtimeversions.get",
            "projects/{p}/locations/{z}/runtimeVersions/{v}",
        ),
        ("GET", _Z + r"/queuedResources", "list_queued", "tpu.queuedresources.list", "projects/{p}/locations/{z}"),
        (
            "POST",
            _Z + r"/queuedResources",
            "create_queued",
            "tpu.queuedresources.create",
            "projects/{p}/locations/{z}/queuedResources/{queuedResourceId}",
        ),
        (
            "GET",
            _Z + r"/queuedResources/(?P<q>[^/:]+)",
            "get_queued",
            "tpu.queuedresources.get",
            "projects/{p}/locations/{z}/queuedResources/{q}",
        ),
        (
            "DELETE",
            _Z + r"/queuedResources/(?P<q>[^/:]+)",
            "delete_queued",
            "tpu.queuedresources.delete",
            "projects/{p}/locations/{z}/queuedResources/{q}",
        ),
    ]
]


# v2alpha1: only what tpuctl asks of it (flex-start queued resources, and a node's termination time).
ALPHA_ROUTES: list[tuple[str, re.Pattern[str], str, str, str]] = [
    route for route in ROUTES if route[2].endswith("_queued")
] + [(m, re.compile(rx + r"\Z"), h, perm, res) for m, rx, h, perm, res in [
    ("GET", _Z + r"/nodes/(?P<n>[^/:]+)", "alpha_get_node", "tpu.nodes.get", "projects/{p}/locations/{z}/nodes/{n}"),
]]  # fmt: skip


@dataclass(order=True)
class _Event:
    due: float
    seq: int
    run: Callable[[], None] = field(compare=False)


class TpuService:
    """All TPU v2 state: nodes, operations and queued resources, keyed by (zone, id)."""

    def __init__(self, host: GoogleStandin, seed: int) -> None:
        self.host = host
        self.zones: dict[str, catalog.ZoneOffer] = catalog.default_offers()
        self.nodes: dict[tuple[str, str], JSON] = {}
        self.operations: dict[tuple[str, str], JSON] = {}
        self._generation: dict[tuple[str, str], int] = {}
        self._events: list[_Event] = []
        self._seq = itertools.count()
        self._rng = random.Random(seed * 7919 + 17)
        self._next_ip: dict[str, int] = {}
        self.queue = QueuedResources(self)
        # zone -> how many acceleratorTypes.list replies come back empty first (an enabled zone's empty reply, seen in the wild)
        self.empty_type_lists: dict[str, int] = {}

    # --- time ---------------------------------------------------------------------------------

    def later(self, delay: float, run: Callable[[], None]) -> None:
        heapq.heappush(self._events, _Event(time.monotonic() + max(0.0, delay), next(self._seq), run))

    def hurry(self) -> None:
        """Make every pending timed change due now, so a test can watch a slow one end without sleeping."""
        now = time.monotonic()
        self._events = sorted(_Event(min(event.due, now), event.seq, event.run) for event in self._events)

    def advance(self) -> None:
        """Apply every state change whose time has come (called under the host's lock)."""
        now = time.monotonic()
        while self._events and self._events[0].due <= now:
            heapq.heappop(self._events).run()
        self.queue.advance(now)

    # --- dispatch -----------------------------------------------------------------------------

    def route(self, method: str, path: str, version: str = "v2") -> tuple[str, dict[str, str], str, str] | None:
        """(handler, path params, permission, resource template) for a /v2/ (or /v2alpha1/) path, or None."""
        for m, pattern, handler, permission, resource in ALPHA_ROUTES if version == "v2alpha1" else ROUTES:
            match = pattern.match(path)
            if match and m == method:
                return handler, {**match.groupdict(), "api": version}, permission, resource
        return None

    def handle(self, handler: str, params: dict[str, str], query: dict[str, str], body: JSON) -> JSON:
        zone = params.get("z")
        if zone is not None and zone not in self.zones:
            raise not_found(f"projects/{params['p']}/locations/{zone}")
        queue = handler.endswith("_queued") or handler.startswith("alpha_")
        result: JSON = getattr(self.queue if queue else self, handler)(params, query, body)
        return result

    # --- names --------------------------------------------------------------------------------

    def parent(self, zone: str) -> str:
        return f"projects/{self.host.project}/locations/{zone}"

    def node_name(self, zone: str, name: str) -> str:
        return f"{self.parent(zone)}/nodes/{name}"

    def now(self) -> str:
        return rfc3339(datetime.now(timezone.utc))

    # --- locations and catalogue --------------------------------------------------------------

    def list_locations(self, params: dict[str, str], query: dict[str, str], body: JSON) -> JSON:
        """Pages of LOCATIONS_PAGE_SIZE when the client names no pageSize: Google's List methods choose a default page
        size of their own (AIP-158), so a client that reads one page and stops sees part of the project's zones."""
        items = [{"name": f"projects/{self.host.project}/locations/{z}", "locationId": z} for z in self.zones]
        return page(items, "locations", query if query.get("pageSize") else {**query, "pageSize": str(LOCATIONS_PAGE_SIZE)})

    def get_location(self, params: dict[str, str], query: dict[str, str], body: JSON) -> JSON:
        return {"name": self.parent(params["z"]), "locationId": params["z"]}

    def generate_service_identity(self, params: dict[str, str], query: dict[str, str], body: JSON) -> JSON:
        return {"identity": {"email": f"service-{self.host.project_number}@cloud-tpu.iam.gserviceaccount.com"}}

    def _accelerator(self, zone: str, name: str) -> JSON:
        return {
            "name": f"{self.parent(zone)}/acceleratorTypes/{name}",
            "type": name,
            "acceleratorConfigs": [catalog.accelerator_config(name)],
        }

    def list_accelerator_types(self, params: dict[str, str], query: dict[str, str], body: JSON) -> JSON:
        zone = params["z"]
        if self.empty_type_lists.get(zone, 0) > 0:
            self.empty_type_lists[zone] -= 1
            return {}
        return page([self._accelerator(zone, t) for t in self.zones[zone].accelerator_types], "acceleratorTypes", query)

    def get_accelerator_type(self, params: dict[str, str], query: dict[str, str], body: JSON) -> JSON:
        zone, name = params["z"], params["t"]
        if name not in self.zones[zone].accelerator_types:
            raise not_found(f"{self.parent(zone)}/acceleratorTypes/{name}")
        return self._accelerator(zone, name)

    def list_runtime_versions(self, params: dict[str, str], query: dict[str, str], body: JSON) -> JSON:
        zone = params["z"]
        items = [{"name": f"{self.parent(zone)}/runtimeVersions/{v}", "version": v} for v in self.zones[zone].runtime_versions]
        return page(items, "runtimeVersions", query)

    def get_runtime_version(self, params: dict[str, str], query: dict[str, str], body: JSON) -> JSON:
        zone, version = params["z"], params["v"]
        if version not in self.zones[zone].runtime_versions:
            raise not_found(f"{self.parent(zone)}/runtimeVersions/{version}")
        return {"name": f"{self.parent(zone)}/runtimeVersions/{version}", "version": version}

    # --- operations ---------------------------------------------------------------------------

    def start_operation(self, zone: str, verb: str, target: str) -> JSON:
        millis = int(time.time() * 1000)
        op_id = f"operation-{millis}-{self._rng.getrandbits(52):013x}-{self._rng.getrandbits(32):08x}-{self._rng.getrandbits(32):08x}"
        op: JSON = {
            "name": f"{self.parent(zone)}/operations/{op_id}",
            "metadata": {"@type": OPERATION_METADATA, "createTime": self.now(), "target": target, "verb": verb, "apiVersion": "v2"},
            "done": False,
        }
        self.operations[(zone, op_id)] = op
        return op

    def finish(self, op: JSON, response: JSON | None = None, error: tuple[str, str] | None = None) -> None:
        op["done"] = True
        op["metadata"]["endTime"] = self.now()
        if error:
            op["error"] = {"code": RPC_CODES[error[0]], "message": error[1]}
        else:
            op["response"] = response if response is not None else {"@type": EMPTY_TYPE}

    def get_operation(self, params: dict[str, str], query: dict[str, str], body: JSON) -> JSON:
        key = (params["z"], params["o"])
        if key not in self.operations:
            raise not_found(f"{self.parent(params['z'])}/operations/{params['o']}")
        return self.operations[key]

    def list_operations(self, params: dict[str, str], query: dict[str, str], body: JSON) -> JSON:
        items = [op for (z, _), op in self.operations.items() if z == params["z"]]
        return page(items, "operations", query)

    # --- nodes --------------------------------------------------------------------------------

    def bump(self, key: tuple[str, str]) -> int:
        """Invalidate timed events for a node (it was deleted, preempted, ...); returns the new generation."""
        self._generation[key] = self._generation.get(key, 0) + 1
        return self._generation[key]

    def _node(self, zone: str, name: str) -> JSON:
        node = self.nodes.get((zone, name))
        if node is None:
            raise not_found(self.node_name(zone, name))
        return node

    def list_nodes(self, params: dict[str, str], query: dict[str, str], body: JSON) -> JSON:
        zone = params["z"]
        return page([n for (z, _), n in sorted(self.nodes.items()) if z == zone], "nodes", query)

    def get_node(self, params: dict[str, str], query: dict[str, str], body: JSON) -> JSON:
        return self._node(params["z"], params["n"])

    def build_node(self, zone: str, node_id: str, spec: JSON, where: str = "node") -> JSON:
        """Validate a create body as the API does and return the stored node (state CREATING)."""
        if not NODE_ID.match(node_id) or len(node_id) > 63:
            raise invalid(
                f"Invalid node id '{node_id}': it must be 1-63 characters, start with a lowercase letter and "
                "contain only lowercase letters, digits and hyphens, not ending with a hyphen.",
                "node_id",
            )
        offer = self.zones[zone]
        accelerator_type = spec.get("acceleratorType")
        config = spec.get("acceleratorConfig")
        if accelerator_type and config:
            raise invalid("Only one of accelerator_type and accelerator_config may be set.", f"{where}.accelerator_config")
        if config:
            try:
                accelerator_type = catalog.type_from_config(config.get("type", ""), config.get("topology", ""))
            except ValueError:
                raise invalid(
                    f"Invalid accelerator config: type {config.get('type')!r}, topology {config.get('topology')!r}.",
                    f"{where}.accelerator_config",
                ) from None
        if not accelerator_type:
            raise invalid("Either accelerator_type or accelerator_config must be set.", f"{where}.accelerator_type")
        if accelerator_type not in offer.accelerator_types:
            raise invalid(f'Accelerator type "{accelerator_type}" is not available in zone "{zone}".', f"{where}.accelerator_type")
        runtime = spec.get("runtimeVersion")
        if not runtime:
            raise invalid("runtime_version is required.", f"{where}.runtime_version")
        if runtime not in offer.runtime_versions:
            raise invalid(f'Runtime version "{runtime}" is not available in zone "{zone}".', f"{where}.runtime_version")
        labels = spec.get("labels", {})
        if len(labels) > 64:
            raise invalid("A resource can have at most 64 labels.", f"{where}.labels")
        for key, value in labels.items():
            if not LABEL_KEY.match(key):
                raise invalid(
                    f"Label key '{key}' violates format constraints: it must start with a lowercase letter and contain only lowercase letters, digits, '_' and '-', at most 63 characters.",
                    f"{where}.labels",
                )
            if not LABEL_VALUE.match(value):
                raise invalid(
                    f"Label value '{value}' of key '{key}' violates format constraints: only lowercase letters, digits, '_' and '-', at most 63 characters.",
                    f"{where}.labels",
                )
        metadata = spec.get("metadata", {})
        if sum(len(k) + len(v) for k, v in metadata.items()) > 512 * 1024:
            raise invalid("Metadata exceeds the 512 KB limit.", f"{where}.metadata")
        scheduling = {k: v for k, v in spec.get("schedulingConfig", {}).items() if v}
        if scheduling.get("preemptible") and scheduling.get("spot"):
            raise invalid("preemptible and spot cannot both be set.", f"{where}.scheduling_config")

        project = self.host.project
        network_in = spec.get("networkConfig", {})
        network = network_in.get("network") or "default"
        if "/" not in network:
            network = f"projects/{project}/global/networks/{network}"
        subnetwork = network_in.get("subnetwork") or "default"
        if "/" not in subnetwork:
            subnetwork = f"projects/{project}/regions/{catalog.region_of(zone)}/subnetworks/{subnetwork}"
        network_config = {k: v for k, v in network_in.items() if v} | {"network": network, "subnetwork": subnetwork}
        account = spec.get("serviceAccount") or {}
        service_account = {
            "email": account.get("email") or f"{self.host.project_number}-compute@developer.gserviceaccount.com",
            "scope": account.get("scope") or [CLOUD_PLATFORM],
        }
        node: JSON = {
            "name": self.node_name(zone, node_id),
            "acceleratorType": accelerator_type,
            "acceleratorConfig": config or catalog.accelerator_config(accelerator_type),
            "state": "CREATING",
            "runtimeVersion": runtime,
            "networkConfig": network_config,
            "cidrBlock": spec.get("cidrBlock") or catalog.cidr_block(zone),
            "serviceAccount": service_account,
            "createTime": self.now(),
            "schedulingConfig": scheduling,
            "id": str(self._rng.randrange(10**18, 2**63 - 1)),
            "apiVersion": "V2",
        }
        for optional in ("description", "labels", "metadata", "tags", "dataDisks", "shieldedInstanceConfig", "networkConfigs"):
            if spec.get(optional):
                node[optional] = spec[optional]
        return node

    def _endpoints(self, node: JSON, zone: str) -> list[JSON]:
        """One endpoint per host: an internal 10.x address in the zone's range, port 8470."""
        base = [int(octet) for octet in node["cidrBlock"].split("/")[0].split(".")]
        external = bool(node["networkConfig"].get("enableExternalIps"))
        endpoints = []
        for _ in range(catalog.hosts(node["acceleratorType"])):
            n = self._next_ip.get(zone, 0)
            self._next_ip[zone] = n + 1
            endpoint: JSON = {"ipAddress": f"{base[0]}.{base[1]}.{base[2] + n // 250}.{n % 250 + 2}", "port": 8470}
            if external:
                endpoint["accessConfig"] = {
                    "externalIp": f"34.{self._rng.randrange(16, 250)}.{self._rng.randrange(0, 256)}.{self._rng.randrange(1, 255)}"
                }
            endpoints.append(endpoint)
        return endpoints

    def make_ready(self, zone: str, node: JSON) -> None:
        node["state"] = "READY"
        node["health"] = "HEALTHY"
        if not node.get("networkEndpoints"):
            node["networkEndpoints"] = self._endpoints(node, zone)

    def check_quota(self, zone: str, node: JSON) -> None:
        """faults.quota_zones names a zone (its quota is spent) or a region (the region's quota is spent, every zone of
        it refused): the 429 names that quota and where, as the TPU API's does."""
        region = catalog.region_of(zone)
        if zone not in self.host.faults.quota_zones and region not in self.host.faults.quota_zones:
            return
        if node.get("schedulingConfig", {}).get("reserved"):
            return  # a reservation's capacity is its own (tpu/docs/quota): the on-demand and preemptible quotas are not spent on it
        scheduling = node.get("schedulingConfig", {})
        regional = zone not in self.host.faults.quota_zones
        metric = catalog.quota_metric(node["acceleratorType"], bool(scheduling.get("preemptible") or scheduling.get("spot")), regional)
        message = f"Quota limit '{metric}' has been exceeded. Limit: 0 in {f'region {region}' if regional else f'zone {zone}'}."
        raise ApiError(
            429,
            message,
            "RESOURCE_EXHAUSTED",
            [
                {
                    "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                    "violations": [{"subject": f"project:{self.host.project}", "description": message}],
                }
            ],
        )

    def capacity_message(self, zone: str) -> str:
        return (
            f'There is no more capacity in the zone "{zone}"; you can try in another zone where Cloud TPU Nodes are offered '
            f"(see https://cloud.google.com/tpu/docs/regions) [EID: {self.host.faults.eid()}]"
        )

    def stockout_error(self, zone: str, kind: str, node: JSON) -> tuple[str, str]:
        """The operation error a stockout of `kind` ends a create with (faults.STOCKOUT_KINDS)."""
        eid = f"[EID: {self.host.faults.eid()}]"
        if kind == "reserved":
            return ("FAILED_PRECONDITION", f"Insufficient reserved capacity. Contact customer support to increase your reservation. {eid}")
        if kind == "preempted":
            return ("INVALID_ARGUMENT", f"Cloud TPU received a bad request. update is not supported while in state PREEMPTED {eid}")
        if kind == "internal":
            return ("INTERNAL", "an internal error has occurred")
        if kind == "quota":
            scheduling = node.get("schedulingConfig", {})
            metric = catalog.quota_metric(node["acceleratorType"], bool(scheduling.get("preemptible") or scheduling.get("spot")))
            return ("RESOURCE_EXHAUSTED", f"Quota '{metric}' exhausted. Limit 0 in zone {zone} {eid}")
        return ("RESOURCE_EXHAUSTED", self.capacity_message(zone))

    def _stocked_out(self, zone: str, key: tuple[str, str], op: JSON, kind: str, node: JSON) -> None:
        """End a create that met no capacity, leaving what the real service leaves (faults.STOCKOUT_KINDS)."""
        if kind in ("capacity", "quota"):
            del self.nodes[key]
            self.bump(key)
        elif kind == "preempted":
            node["state"] = "PREEMPTED"
        self.finish(op, error=self.stockout_error(zone, kind, node))

    def create_node(self, params: dict[str, str], query: dict[str, str], body: JSON) -> JSON:
        zone, node_id = params["z"], query.get("nodeId", "")
        if not node_id:
            raise invalid("node_id is required.", "node_id")
        node = self.build_node(zone, node_id, normalize(body, NODE, "node"))
        key = (zone, node_id)
        if key in self.nodes:
            raise already_exists(node["name"])
        self.check_quota(zone, node)
        stockout = self.host.faults.take_stockout(zone)
        if stockout == "refused":
            raise ApiError(429, self.capacity_message(zone), "RESOURCE_EXHAUSTED")
        self.nodes[key] = node
        generation = self.bump(key)
        op = self.start_operation(zone, "create", node["name"])
        failure = self.host.faults.take_operation_failure()
        no_capacity = zone in self.host.faults.capacity_zones

        def complete() -> None:
            current = self.nodes.get(key)
            if current is None or self._generation.get(key) != generation or current["state"] != "CREATING":
                self.finish(op, error=("ABORTED", f"The node {node['name']} was deleted or changed while it was being created."))
                return
            if stockout:
                self._stocked_out(zone, key, op, stockout, current)
                return
            if no_capacity or failure:
                del self.nodes[key]
                self.bump(key)
                self.finish(op, error=("RESOURCE_EXHAUSTED", self.capacity_message(zone)) if no_capacity else ("INTERNAL", failure or ""))
                return
            self.make_ready(zone, current)
            self.finish(op, {"@type": NODE_TYPE, **current})

        if stockout != "stuck":
            self.later(self.host.create_delay_s, complete)
        return op

    def _transition(self, params: dict[str, str], verb: str, allowed: tuple[str, ...], passing: str, final: str | None) -> JSON:
        """Shared shape of delete/stop/start: a passing state now, the final state (None: gone) later."""
        zone, name = params["z"], params["n"]
        key = (zone, name)
        node = self._node(zone, name)
        if node["state"] not in allowed:
            raise failed_precondition(f"Node {node['name']} is in state {node['state']}; {verb} needs one of {', '.join(allowed)}.")
        before: JSON = {k: node[k] for k in ("state", "health") if k in node}
        node["state"] = passing
        node.pop("health", None)
        generation = self.bump(key)
        op = self.start_operation(zone, verb, node["name"])
        failure = self.host.faults.take_operation_failure()
        stockout = self.host.faults.take_stockout(zone) if verb == "start" else None

        def complete() -> None:
            current = self.nodes.get(key)
            if current is None or self._generation.get(key) != generation:
                self.finish(op, error=("ABORTED", f"The node {node['name']} changed during {verb}."))
                return
            if failure or stockout:
                current.update(before)  # a start that met no capacity leaves the node STOPPED
                self.finish(op, error=self.stockout_error(zone, stockout, current) if stockout else ("INTERNAL", failure or ""))
                return
            if final is None:
                del self.nodes[key]
                self.bump(key)
                self._node_gone(current)
                self.finish(op)
                return
            current["state"] = final
            if final == "READY":
                self.make_ready(zone, current)
            self.finish(op, {"@type": NODE_TYPE, **current})

        self.later(self.host.create_delay_s, complete)
        return op

    def delete_node(self, params: dict[str, str], query: dict[str, str], body: JSON) -> JSON:
        zone, name = params["z"], params["n"]
        node = self._node(zone, name)
        if node["state"] == "DELETING":
            # A retried delete gets its own operation, which ends when the first deletion does.
            op = self.start_operation(zone, "delete", node["name"])

            def follow() -> None:
                if (zone, name) in self.nodes:
                    self.finish(op, error=("ABORTED", f"The deletion of {node['name']} did not complete."))
                else:
                    self.finish(op)

            self.later(self.host.create_delay_s, follow)
            return op
        allowed = ("CREATING", "READY", "STOPPED", "PREEMPTED", "TERMINATED", "STARTING", "STOPPING", "REPAIRING")
        op = self._transition(params, "delete", allowed, "DELETING", None)
        return {**op, "done": True, "response": {}} if self.host.faults.untyped_delete_replies else op

    def stop_node(self, params: dict[str, str], query: dict[str, str], body: JSON) -> JSON:
        return self._transition(params, "stop", ("READY",), "STOPPING", "STOPPED")

    def start_node(self, params: dict[str, str], query: dict[str, str], body: JSON) -> JSON:
        return self._transition(params, "start", ("STOPPED",), "STARTING", "READY")

    def _node_gone(self, node: JSON) -> None:
        """A node made by a queued resource that disappears leaves its queued resource SUSPENDED."""
        self.queue.node_gone(node)

    # Test hooks (the host takes its lock around these).

    def preempt(self, zone: str, name: str) -> None:
        node = self._node(zone, name)
        node["state"] = "PREEMPTED"
        node.pop("health", None)
        self.bump((zone, name))
        self._node_gone(node)

    def vanish(self, zone: str, name: str) -> None:
        node = self.nodes.pop((zone, name), None)
        self.bump((zone, name))
        if node:
            self._node_gone(node)

    def add_ready(self, zone: str, name: str, accelerator_type: str | None, runtime: str | None) -> JSON:
        offer = self.zones[zone]
        spec = {"acceleratorType": accelerator_type or offer.accelerator_types[0], "runtimeVersion": runtime or offer.runtime_versions[0]}
        node = self.build_node(zone, name, spec)
        self.make_ready(zone, node)
        self.nodes[(zone, name)] = node
        self.bump((zone, name))
        return node
