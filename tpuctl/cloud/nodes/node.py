"""A TPU VM as tpuctl sees it: the v2 API's JSON `Node` resource with typed accessors.

Every command reads a node through this one type, whether it came from a list,
a get or the end of a create. The raw JSON stays available as `resource`
because it is exactly what `--json` prints (the documented REST shape, field
names in camelCase, enums as names); the accessors only interpret it, so a
field a newer API adds still reaches `--json` untouched.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

JSON = dict[str, Any]
# States in which a node's hosts are gone for good: only a delete and a new create help.
LOST_STATES = ("PREEMPTED", "TERMINATED")
# RFC 3339 with up to nanoseconds, which datetime.fromisoformat (3.10) cannot read past microseconds.
_FRACTION = re.compile(r"(\.\d{6})\d+")


def last_part(path: str) -> str:
    """`projects/p/global/networks/default` -> `default`: the API answers full paths for short names."""
    return path.rstrip("/").rsplit("/", 1)[-1]


def mapping(value: Any) -> Mapping[str, Any]:
    """A JSON object, or an empty one where the API put something else (or nothing)."""
    return value if isinstance(value, Mapping) else {}


@dataclass(frozen=True)
class Endpoint:
    """One host of a node: its internal address and, when it has one, its external address."""

    internal_ip: str
    external_ip: str | None


@dataclass(frozen=True)
class Node:
    resource: Mapping[str, Any]  # the API's JSON, as it came
    zone: str = field(default="")  # the zone it was asked for in (the API's name also holds it)
    flex_start: bool = False  # made by a flex-start queued resource: v2 cannot say so (node_lookup.with_kinds asks v2alpha1)

    @property
    def path(self) -> str:
        """The full resource name, projects/P/locations/Z/nodes/N."""
        return str(self.resource.get("name", ""))

    @property
    def name(self) -> str:
        return last_part(self.path)

    def _str(self, key: str) -> str:
        value = self.resource.get(key)
        return str(value) if value else ""

    @property
    def state(self) -> str:
        return self._str("state")

    @property
    def health(self) -> str:
        """The health enum's name; "" when the API gave none (it omits it while creating)."""
        return self._str("health")

    @property
    def health_description(self) -> str:
        return self._str("healthDescription")

    @property
    def ready(self) -> bool:
        """Usable: READY alone is not enough, a READY node can still be UNHEALTHY."""
        return self.state == "READY" and self.health == "HEALTHY"

    @property
    def lost(self) -> bool:
        return self.state in LOST_STATES

    @property
    def runtime_version(self) -> str:
        return self._str("runtimeVersion")

    @property
    def accelerator_type(self) -> str:
        """`v4-8`; "" for a node created by generation and topology instead."""
        return self._str("acceleratorType")

    @property
    def config_type(self) -> str:
        """AcceleratorConfig.Type's name (`V5LITE_POD`), or ""."""
        return str(mapping(self.resource.get("acceleratorConfig")).get("type") or "")

    @property
    def topology(self) -> str:
        return str(mapping(self.resource.get("acceleratorConfig")).get("topology") or "")

    @property
    def accelerator(self) -> str:
        """What `list` shows: the type, else the lower-case generation and topology, else "?"."""
        if self.accelerator_type:
            return self.accelerator_type
        return f"{self.config_type.lower()} {self.topology}" if self.topology else "?"

    @property
    def spot(self) -> bool:
        return bool(mapping(self.resource.get("schedulingConfig")).get("spot"))

    @property
    def preemptible(self) -> bool:
        return bool(mapping(self.resource.get("schedulingConfig")).get("preemptible"))

    @property
    def reserved(self) -> bool:
        """Created from a reservation (SchedulingConfig.reserved): billed by the reservation, not at a list price."""
        return bool(mapping(self.resource.get("schedulingConfig")).get("reserved"))

    @property
    def capacity(self) -> str:
        """The node's capacity kind in tpuctl/tpu/capacity.py's names; a flex-start node looks on-demand in v2,
        only its v2alpha1 queued resource says flex-start (node_lookup.with_kinds)."""
        if self.flex_start:
            return "flex-start"
        if self.reserved:
            return "reserved"
        return "spot" if self.spot else "preemptible" if self.preemptible else "on-demand"

    @property
    def terminates(self) -> datetime | None:
        """When the service deletes the node (a flex-start one: v2alpha1's output-only SchedulingConfig.terminationTimestamp)."""
        return _stamp(str(mapping(self.resource.get("schedulingConfig")).get("terminationTimestamp") or ""))

    @property
    def created(self) -> datetime | None:
        return _stamp(self._str("createTime"))

    @property
    def endpoints(self) -> tuple[Endpoint, ...]:
        """Every host in worker order; internal_ip is "" for one that has no address yet (a slice being created)."""
        found = []
        for endpoint in self.resource.get("networkEndpoints") or []:
            entry = mapping(endpoint)
            external = mapping(entry.get("accessConfig")).get("externalIp")
            found.append(Endpoint(str(entry.get("ipAddress") or ""), str(external) if external else None))
        return tuple(found)

    @property
    def host_count(self) -> int:
        """Hosts the API lists, addressed or not (a slice lists them all before they have IPs)."""
        return len(self.endpoints)

    @property
    def labels(self) -> dict[str, str]:
        return {str(k): str(v) for k, v in mapping(self.resource.get("labels")).items()}

    @property
    def queued_resource(self) -> str:
        return self._str("queuedResource")

    @property
    def service_account(self) -> str:
        return str(mapping(self.resource.get("serviceAccount")).get("email") or "")

    @property
    def network(self) -> str:
        return str(mapping(self.resource.get("networkConfig")).get("network") or "")

    @property
    def subnetwork(self) -> str:
        return str(mapping(self.resource.get("networkConfig")).get("subnetwork") or "")

    @property
    def metadata(self) -> dict[str, str]:
        return {str(k): str(v) for k, v in mapping(self.resource.get("metadata")).items()}

    def to_json(self) -> JSON:
        """What `--json` prints: the API's JSON as it came, plus its zone (and schedulingConfig always present)."""
        return {**self.resource, "schedulingConfig": self.resource.get("schedulingConfig", {}), "zone": self.zone}


def _stamp(text: str) -> datetime | None:
    """An RFC 3339 time from the API (nanoseconds cut to what Python reads), None when absent or not one."""
    if not text:
        return None
    try:
        stamp = datetime.fromisoformat(_FRACTION.sub(r"\1", text.replace("Z", "+00:00")))
    except ValueError:
        return None
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=timezone.utc)  # the API's times are UTC
