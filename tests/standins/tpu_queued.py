"""Queued resources of the Cloud TPU v2 API (and v2alpha1's, for flex-start): requests for nodes that wait in a queue.

A queued resource moves WAITING_FOR_RESOURCES -> PROVISIONING (its nodes
exist, CREATING) -> ACTIVE (nodes READY), one create delay per step; in a
zone listed in ``faults.capacity_zones`` it keeps waiting, and fails once its
``queueingPolicy`` validity window has passed. States are advanced on demand
by TpuService.advance, like every other timed change in the stand-in.

v2alpha1 (https://tpu.googleapis.com/$discovery/rest?version=v2alpha1, as google-api-go-client's tpu-api.json
holds it) adds `provisioningModel` and `runDuration`: a FLEX_START request starts ACCEPTED, then goes
WAITING_FOR_RESOURCES -> PROVISIONING -> ACTIVE, and when its maxRunDuration (at most 7 days) has run the
service deletes its nodes and the request is SUSPENDED (https://cloud.google.com/tpu/docs/request-using-flex-start).
Only v2alpha1 shows those fields and a node's output-only `schedulingConfig.terminationTimestamp`. A stockout
scripted for the zone (faults.stockout) fails the next queued resource there once it would have been provisioned:
"capacity" with code 8 and the zone's capacity message, "reserved" (a request naming a reservation) with code 9.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from tests.standins.wire import (
    JSON,
    NODE,
    QUEUED_RESOURCE,
    RPC_CODES,
    Enum,
    already_exists,
    failed_precondition,
    invalid,
    normalize,
    not_found,
    page,
)

if TYPE_CHECKING:
    from tests.standins.tpu_api import TpuService

QUEUED_RESOURCE_TYPE = "type.googleapis.com/google.cloud.tpu.v2.QueuedResource"
ALPHA = "v2alpha1"
MAX_RUN_S = 7 * 86400
PROVISIONING_MODEL = Enum(
    "google.cloud.tpu.v2alpha1.QueuedResource.ProvisioningModel",
    {"PROVISIONING_MODEL_UNSPECIFIED": 0, "STANDARD": 1, "SPOT": 2, "RESERVATION_BOUND": 3, "FLEX_START": 4},
)
ALPHA_NODE: JSON = {  # v2alpha1's Node: v2's and these
    **NODE,
    "autocheckpointEnabled": "bool",
    "bootDiskConfig": "any",
    "schedulingConfig": {"preemptible": "bool", "reserved": "bool", "spot": "bool", "provisioningModel": "str", "reservationName": "str"},
}
QUEUED_RESOURCE_ALPHA: JSON = {
    **QUEUED_RESOURCE,
    "tpu": {"nodeSpec": [{"parent": "str", "nodeId": "str", "multiNodeParams": {"nodeCount": "int", "nodeIdPrefix": "str"}, "node": ALPHA_NODE}]},
    "bestEffort": {},
    "guaranteed": {"minDuration": "str", "reserved": "bool"},
    "provisioningModel": PROVISIONING_MODEL,
    "runDuration": {"maxRunDuration": "str", "terminationTime": "str"},
}
_ID = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?\Z")


def parse_duration(text: str, where: str) -> float:
    """Seconds in a google.protobuf.Duration JSON string such as "3600s" or "1.5s"."""
    match = re.fullmatch(r"(-?[0-9]+(?:\.[0-9]{1,9})?)s", text)
    if not match:
        raise invalid(f"Invalid value at '{where}' (type.googleapis.com/google.protobuf.Duration), \"{text}\"", where)
    return float(match.group(1))


def parse_time(text: str, where: str) -> datetime:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise invalid(f"Invalid value at '{where}' (type.googleapis.com/google.protobuf.Timestamp), \"{text}\"", where) from None


@dataclass
class QueuedRecord:
    """A queued resource plus the timing the state machine needs (never sent)."""

    body: JSON
    zone: str
    node_ids: list[str]
    node_template: JSON
    provision_at: float
    valid_until: float | None
    active_at: float | None = None
    delete_at: float | None = None
    delete_op: str | None = None
    run_s: float | None = None  # flex-start: runDuration.maxRunDuration
    accepted_until: float = 0.0  # flex-start: ACCEPTED for one create delay, then in the queue
    ends_at: float | None = None  # flex-start: when its run ends (set once ACTIVE)
    ends_wall: str | None = None  # ... as the RFC 3339 time v2alpha1 shows as terminationTimestamp
    fail_with: tuple[str, str] | None = None  # a scripted stockout: (rpc status, message) it FAILS with
    history: list[str] = field(default_factory=list)  # every state it went through, for tests


class QueuedResources:
    """The queued resources of all zones, keyed by (zone, id); node work is delegated to the TpuService."""

    def __init__(self, tpu: TpuService) -> None:
        self.tpu = tpu
        self.records: dict[tuple[str, str], QueuedRecord] = {}

    def advance(self, now: float) -> None:
        for key in list(self.records):
            if key in self.records:
                self._advance_one(key, now)

    def node_gone(self, node: JSON) -> None:
        """A node made by a queued resource that disappears leaves its queued resource SUSPENDED."""
        owner = node.get("queuedResource")
        for record in self.records.values():
            if owner and record.body["name"] == owner and record.body["state"]["state"] in ("ACTIVE", "PROVISIONING"):
                self.set_state(record, "SUSPENDED")

    def set_state(self, record: QueuedRecord, state: str, error: JSON | None = None) -> None:
        body: JSON = {"state": state, "stateInitiator": "USER" if state == "DELETING" else "SERVICE"}
        data_key = {
            "PROVISIONING": "provisioningData",
            "ACTIVE": "activeData",
            "SUSPENDED": "suspendedData",
            "DELETING": "deletingData",
        }.get(state)
        if data_key:
            body[data_key] = {}
        if state == "FAILED":
            body["failedData"] = {"error": error or {}}
        record.body["state"] = body
        record.history.append(state)

    def _queued(self, zone: str, qid: str) -> QueuedRecord:
        record = self.records.get((zone, qid))
        if record is None:
            raise not_found(f"{self.tpu.parent(zone)}/queuedResources/{qid}")
        return record

    def create_queued(self, params: dict[str, str], query: dict[str, str], body: JSON) -> JSON:
        zone, qid = params["z"], query.get("queuedResourceId", "")
        if not qid:
            raise invalid("queued_resource_id is required.", "queued_resource_id")
        if not _ID.match(qid) or len(qid) > 63:
            raise invalid(f"Invalid queued resource id '{qid}'.", "queued_resource_id")
        alpha = params.get("api") == ALPHA
        spec = normalize(body, QUEUED_RESOURCE_ALPHA if alpha else QUEUED_RESOURCE, "queued_resource")
        run_s = self._run_duration(spec)
        specs = spec.get("tpu", {}).get("nodeSpec", [])
        if len(specs) != 1:
            raise invalid("Exactly one tpu.node_spec is supported.", "queued_resource.tpu.node_spec")
        node_spec = specs[0]
        if spec.get("reservationName") and not re.fullmatch(r"projects/[^/]+/locations/[^/]+/reservations/[^/]+", spec["reservationName"]):
            raise invalid(f"Invalid reservation name \"{spec['reservationName']}\".", "queued_resource.reservation_name")
        if node_spec.get("parent") not in (self.tpu.parent(zone), f"projects/{self.tpu.host.project_number}/locations/{zone}"):
            raise invalid(f"node_spec.parent must be {self.tpu.parent(zone)}.", "queued_resource.tpu.node_spec[0].parent")
        multi = node_spec.get("multisliceParams") or node_spec.get("multiNodeParams")
        if multi:
            prefix = multi.get("nodeIdPrefix") or qid
            node_ids = [f"{prefix}-{i}" for i in range(int(multi.get("nodeCount", 0)))]
        else:
            node_ids = [node_spec.get("nodeId", "")]
        if not node_ids:
            raise invalid("node_count must be positive.", "queued_resource.tpu.node_spec[0].multislice_params.node_count")
        template = dict(node_spec.get("node", {}))
        if "spot" in spec:
            template["schedulingConfig"] = {**template.get("schedulingConfig", {}), "spot": True}
        for node_id in node_ids:  # validate now, as the API does at admission
            probe = self.tpu.build_node(zone, node_id, template, "queued_resource.tpu.node_spec[0].node")
            if (zone, node_id) in self.tpu.nodes:
                raise already_exists(probe["name"])
        if (zone, qid) in self.records:
            raise already_exists(f"{self.tpu.parent(zone)}/queuedResources/{qid}")
        # Flex-start counts against preemptible quota (https://cloud.google.com/tpu/docs/request-using-flex-start); a
        # reservation against its own capacity, not the on-demand or preemptible quota the quota faults spend.
        if not (spec.get("reservationName") or (spec.get("guaranteed") or {}).get("reserved")):
            self.tpu.check_quota(zone, {**probe, "schedulingConfig": {"preemptible": True}} if run_s is not None else probe)

        now = time.monotonic()
        wall = datetime.now(timezone.utc)
        policy = spec.get("queueingPolicy", {})
        after = now
        until: float | None = None
        if "validAfterDuration" in policy:
            after = now + parse_duration(policy["validAfterDuration"], "queued_resource.queueing_policy.valid_after_duration")
        if "validAfterTime" in policy:
            after = now + (parse_time(policy["validAfterTime"], "queued_resource.queueing_policy.valid_after_time") - wall).total_seconds()
        if "validUntilDuration" in policy:
            until = now + parse_duration(policy["validUntilDuration"], "queued_resource.queueing_policy.valid_until_duration")
        if "validUntilTime" in policy:
            until = now + (parse_time(policy["validUntilTime"], "queued_resource.queueing_policy.valid_until_time") - wall).total_seconds()

        name = f"{self.tpu.parent(zone)}/queuedResources/{qid}"
        stored = {"name": name, "createTime": self.tpu.now(), **{k: v for k, v in spec.items() if k not in ("name", "createTime", "state")}}
        record = QueuedRecord(
            stored, zone, node_ids, template, provision_at=max(after, now + self.tpu.host.create_delay_s), valid_until=until, run_s=run_s
        )
        if run_s is not None:
            record.accepted_until = now + self.tpu.host.create_delay_s
            record.provision_at += self.tpu.host.create_delay_s
        stockout = self.tpu.host.faults.take_stockout(zone)
        if stockout == "capacity":
            record.fail_with = ("RESOURCE_EXHAUSTED", self.tpu.capacity_message(zone))
        elif stockout == "reserved" and spec.get("reservationName"):
            record.fail_with = self.tpu.stockout_error(zone, "reserved", template)
        self.set_state(record, "ACCEPTED" if run_s is not None else "WAITING_FOR_RESOURCES")
        op = self.tpu.start_operation(zone, "create", name)
        failure = self.tpu.host.faults.take_operation_failure()
        if failure:
            self.tpu.finish(op, error=("INTERNAL", failure))
            return op
        self.records[(zone, qid)] = record
        self.tpu.later(0.0, lambda: self.tpu.finish(op, {"@type": QUEUED_RESOURCE_TYPE, **record.body}))
        return op

    @staticmethod
    def _run_duration(spec: JSON) -> float | None:
        """A flex-start request's maxRunDuration in seconds (None for any other); one without it, or over 7 days, is refused."""
        if spec.get("provisioningModel") != "FLEX_START":
            return None
        where = "queued_resource.run_duration.max_run_duration"
        text = spec.get("runDuration", {}).get("maxRunDuration")
        if not text:
            raise invalid("A FLEX_START queued resource requires run_duration.max_run_duration.", where)
        seconds = parse_duration(text, where)
        if not 0 < seconds <= MAX_RUN_S:
            raise invalid(f"max_run_duration must be positive and at most 7 days, got {text}.", where)
        return seconds

    def _advance_one(self, key: tuple[str, str], now: float) -> None:
        """Move one queued resource along WAITING_FOR_RESOURCES -> PROVISIONING -> ACTIVE (or FAILED)."""
        record = self.records[key]
        zone = record.zone
        delay = self.tpu.host.create_delay_s
        while True:
            state = record.body["state"]["state"]
            if state == "ACCEPTED" and now < record.accepted_until:
                return
            if state == "ACCEPTED":
                self.set_state(record, "WAITING_FOR_RESOURCES")
            elif state == "WAITING_FOR_RESOURCES" and record.fail_with and now >= record.provision_at:
                status, message = record.fail_with
                self.set_state(record, "FAILED", {"code": RPC_CODES[status], "message": message})
                return
            elif state == "WAITING_FOR_RESOURCES":
                blocked = zone in self.tpu.host.faults.capacity_zones
                if record.valid_until is not None and now >= record.valid_until and (blocked or record.provision_at > record.valid_until):
                    self.set_state(record, "FAILED", {"code": RPC_CODES["RESOURCE_EXHAUSTED"], "message": self.tpu.capacity_message(zone)})
                    return
                if blocked or now < record.provision_at:
                    return
                for node_id in record.node_ids:
                    node = self.tpu.build_node(zone, node_id, record.node_template)
                    node["queuedResource"] = record.body["name"]
                    self.tpu.nodes[(zone, node_id)] = node
                    self.tpu.bump((zone, node_id))
                record.active_at = record.provision_at + delay
                self.set_state(record, "PROVISIONING")
            elif state == "PROVISIONING" and record.active_at is not None and now >= record.active_at:
                for node_id in record.node_ids:
                    made = self.tpu.nodes.get((zone, node_id))
                    if made is not None and made["state"] == "CREATING":
                        self.tpu.make_ready(zone, made)
                self.set_state(record, "ACTIVE")
                if record.run_s is not None:
                    record.ends_at = now + record.run_s
                    ends = datetime.now(timezone.utc).timestamp() + record.run_s
                    record.ends_wall = datetime.fromtimestamp(ends, timezone.utc).isoformat().replace("+00:00", "Z")
            elif state == "ACTIVE" and record.ends_at is not None and now >= record.ends_at:
                for node_id in record.node_ids:  # the run is over: the service deletes the nodes, the request stays
                    owned = self.tpu.nodes.pop((zone, node_id), None)
                    if owned is not None:
                        self.tpu.bump((zone, node_id))
                self.set_state(record, "SUSPENDED")
                return
            elif state == "DELETING" and record.delete_at is not None and now >= record.delete_at:
                for node_id in record.node_ids:
                    owned = self.tpu.nodes.get((zone, node_id))
                    if owned is not None and owned.get("queuedResource") == record.body["name"]:
                        del self.tpu.nodes[(zone, node_id)]
                        self.tpu.bump((zone, node_id))
                del self.records[key]
                op = self.tpu.operations.get((zone, (record.delete_op or "").rsplit("/", 1)[-1]))
                if op is not None:
                    self.tpu.finish(op)
                return
            else:
                return

    def list_queued(self, params: dict[str, str], query: dict[str, str], body: JSON) -> JSON:
        items = [self._shown(r.body, params) for (z, _), r in sorted(self.records.items()) if z == params["z"]]
        return page(items, "queuedResources", query)

    def get_queued(self, params: dict[str, str], query: dict[str, str], body: JSON) -> JSON:
        return self._shown(self._queued(params["z"], params["q"]).body, params)

    @staticmethod
    def _shown(body: JSON, params: dict[str, str]) -> JSON:
        """A queued resource as the API version asked shows it: v2 has no provisioningModel or runDuration."""
        return body if params.get("api") == ALPHA else {k: v for k, v in body.items() if k in QUEUED_RESOURCE}

    def alpha_get_node(self, params: dict[str, str], query: dict[str, str], body: JSON) -> JSON:
        """v2alpha1's node: v2's, plus the output-only terminationTimestamp of a flex-start node."""
        node = self.tpu.get_node(params, query, body)
        for record in self.records.values():
            if record.ends_wall and node.get("queuedResource") == record.body["name"]:
                return {**node, "schedulingConfig": {**node.get("schedulingConfig", {}), "terminationTimestamp": record.ends_wall}}
        return node

    def delete_queued(self, params: dict[str, str], query: dict[str, str], body: JSON) -> JSON:
        zone = params["z"]
        record = self._queued(zone, params["q"])
        force = query.get("force", "").lower() == "true"
        live = [
            n
            for n in record.node_ids
            if (zone, n) in self.tpu.nodes and self.tpu.nodes[(zone, n)].get("queuedResource") == record.body["name"]
        ]
        if live and not force:
            raise failed_precondition(
                f"Queued resource {record.body['name']} still has nodes ({', '.join(live)}); delete them first or set force=true."
            )
        op = self.tpu.start_operation(zone, "delete", record.body["name"])
        for node_id in live:
            self.tpu.nodes[(zone, node_id)]["state"] = "DELETING"
            self.tpu.nodes[(zone, node_id)].pop("health", None)
            self.tpu.bump((zone, node_id))
        self.set_state(record, "DELETING")
        record.delete_at = time.monotonic() + self.tpu.host.create_delay_s
        record.delete_op = op["name"]
        return op
