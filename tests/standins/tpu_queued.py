"""Queued resources of the Cloud TPU v2 API: requests for nodes that wait in a queue.

A queued resource moves WAITING_FOR_RESOURCES -> PROVISIONING (its nodes
exist, CREATING) -> ACTIVE (nodes READY), one create delay per step; in a
zone listed in ``faults.capacity_zones`` it keeps waiting, and fails once its
``queueingPolicy`` validity window has passed. States are advanced on demand
by TpuService.advance, like every other timed change in the stand-in.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from tests.standins.wire import (
    JSON,
    QUEUED_RESOURCE,
    RPC_CODES,
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
        spec = normalize(body, QUEUED_RESOURCE, "queued_resource")
        specs = spec.get("tpu", {}).get("nodeSpec", [])
        if len(specs) != 1:
            raise invalid("Exactly one tpu.node_spec is supported.", "queued_resource.tpu.node_spec")
        node_spec = specs[0]
        if node_spec.get("parent") not in (self.tpu.parent(zone), f"projects/{self.tpu.host.project_number}/locations/{zone}"):
            raise invalid(f"node_spec.parent must be {self.tpu.parent(zone)}.", "queued_resource.tpu.node_spec[0].parent")
        multi = node_spec.get("multisliceParams")
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
        self.tpu.check_quota(zone, probe)

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
            stored, zone, node_ids, template, provision_at=max(after, now + self.tpu.host.create_delay_s), valid_until=until
        )
        self.set_state(record, "WAITING_FOR_RESOURCES")
        op = self.tpu.start_operation(zone, "create", name)
        failure = self.tpu.host.faults.take_operation_failure()
        if failure:
            self.tpu.finish(op, error=("INTERNAL", failure))
            return op
        self.records[(zone, qid)] = record
        self.tpu.later(0.0, lambda: self.tpu.finish(op, {"@type": QUEUED_RESOURCE_TYPE, **record.body}))
        return op

    def _advance_one(self, key: tuple[str, str], now: float) -> None:
        """Move one queued resource along WAITING_FOR_RESOURCES -> PROVISIONING -> ACTIVE (or FAILED)."""
        record = self.records[key]
        zone = record.zone
        delay = self.tpu.host.create_delay_s
        while True:
            state = record.body["state"]["state"]
            if state == "WAITING_FOR_RESOURCES":
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
        items = [r.body for (z, _), r in sorted(self.records.items()) if z == params["z"]]
        return page(items, "queuedResources", query)

    def get_queued(self, params: dict[str, str], query: dict[str, str], body: JSON) -> JSON:
        return self._queued(params["z"], params["q"]).body

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
