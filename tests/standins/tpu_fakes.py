"""In-memory fakes of Google's TPU API as tpuctl's lifecycle, hunt and run-VM code see it: scripted node states,
operation endings per zone, queued resources; tpuctl's own Node, NodeSpec and lifecycle types are the real ones.
Nothing sleeps: waits record their pauses, and a hunt's clock is a counter the fake's polls advance."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tpuctl.cloud.capacity.candidates import Plan
from tpuctl.cloud.capacity.hunt import Candidate
from tpuctl.cloud.capacity.run_vm import Ended, Hunting, Recreating, RunVm, VmEvent, Wanted
from tpuctl.cloud.nodes import lifecycle, nodespec
from tpuctl.cloud.nodes.node import Node
from tpuctl.cloud.nodes.nodespec import NodeSpec
from tpuctl.cloud.nodes.run_nodes import LABEL_KEY, label_value
from tpuctl.cloud.nodes.tpu import Operation, Queued
from tpuctl.inputs.errors import TpuctlError
from tpuctl.settings import cloud as settings
from tpuctl.tpu.capacity import Capacity

ZONE = "us-central2-b"
SPEC = NodeSpec(name="my-tpu", project="tpuctl-test", zone=ZONE, runtime_version="tpu-ubuntu2204-base", accelerator_type="v4-8")


@dataclass
class FakeApi:
    """The TPU API as the lifecycle sees it: each poll of a node shows the next scripted state."""

    project: str = "tpuctl-test"
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    # name -> the states later polls will show; "GONE" removes the node
    script: dict[str, list[str]] = field(default_factory=dict)
    queued: dict[str, list[str | Queued]] = field(default_factory=dict)
    failed_operation: tuple[int, str] | None = None  # how the next create's operation ends
    then_failed: list[tuple[int, str]] = field(default_factory=list)  # ... and the creates after it
    calls: list[str] = field(default_factory=list)

    def add(self, name: str, state: str, health: str = "HEALTHY", **extra: Any) -> None:
        self.nodes[name] = {"name": f"projects/{self.project}/locations/{ZONE}/nodes/{name}", "state": state, "health": health, **extra}

    def get_node(self, zone: str, name: str) -> Node | None:
        upcoming = self.script.get(name)
        if upcoming:
            state = upcoming.pop(0)
            if state == "GONE":
                self.nodes.pop(name, None)
            elif name in self.nodes:
                self.nodes[name]["state"] = state
                if state == "READY" and not self.nodes[name]["health"]:
                    self.nodes[name]["health"] = "HEALTHY"  # the service reports health once the node is up
            else:
                self.add(name, state, **SPEC.resource())
        found = self.nodes.get(name)
        return None if found is None else Node(dict(found), zone)

    def create_node(self, zone: str, name: str, resource: dict[str, Any]) -> str | None:
        self.calls.append(f"create {name}")
        if name in self.nodes:
            return None
        self.add(name, "CREATING", health="", **resource)
        self.script[name] = self.script.get(name) or ["CREATING", "READY"]
        return "operations/create"

    def delete_node(self, zone: str, name: str) -> str | None:
        self.calls.append(f"delete {name}")
        if name not in self.nodes:
            return None
        self.script[name] = ["DELETING", "GONE"]
        return "operations/delete"

    def stop_node(self, zone: str, name: str) -> str | None:
        self.calls.append(f"stop {name}")
        self.script[name] = ["STOPPING", "STOPPED"]
        return "operations/stop"

    def start_node(self, zone: str, name: str) -> str | None:
        self.calls.append(f"start {name}")
        self.script[name] = ["STARTING", "READY"]
        return "operations/start"

    def operation(self, zone: str, name: str) -> Operation:
        if self.failed_operation and name == "operations/create":
            failed = self.failed_operation
            self.failed_operation = self.then_failed.pop(0) if self.then_failed else None
            return Operation(True, *failed)
        return Operation(done=False)

    def create_queued(self, zone: str, resource_id: str, resource: dict[str, Any]) -> bool:
        self.calls.append(f"queue {resource_id}")
        self.queued.setdefault(resource_id, ["WAITING_FOR_RESOURCES", "ACTIVE"])
        self.script[resource_id] = self.script.get(resource_id) or ["READY"]  # a test may script that no node comes
        return True

    def get_queued(self, zone: str, resource_id: str) -> Queued | None:
        states = self.queued.get(resource_id)
        if not states:
            return None
        state = states.pop(0) if len(states) > 1 else states[0]
        found = state if isinstance(state, Queued) else Queued(state)
        return replace(found, resource_id=resource_id, node_ids=found.node_ids or (resource_id,))  # as tpuctl queues: one node of its id

    def delete_queued(self, zone: str, resource_id: str) -> None:
        self.calls.append(f"delete queued {resource_id}")
        self.queued.pop(resource_id, None)
        if resource_id in self.nodes:  # force: the queued resource's node goes with it
            self.script[resource_id] = ["DELETING", "GONE"]

    def list_queued(self, zone: str) -> list[Queued]:
        return [q for q in (self.get_queued(zone, resource_id) for resource_id in list(self.queued)) if q is not None]


def no_sleep(seconds: float) -> None:
    """Waits cost nothing; a wait that never ends reaches the longest pause and fails instead of hanging the suite."""
    if seconds >= lifecycle.MAX_POLL_S:
        raise AssertionError("the wait never ended")


# --- across zones: the capacity hunt's fake (tests/unit/test_hunt.py) ----------------------------------------

PROJECT = "tpuctl-test"
BASE = NodeSpec(name="hunt", project=PROJECT, zone="us-central2-b", runtime_version="tpu-vm-tf-2.16.1-pod-pjrt", accelerator_type="v5litepod-16")
CODE_8 = 'There is no more capacity in the zone "{zone}"; you can try in another zone where Cloud TPU Nodes are offered'
STOCKOUTS = {
    "capacity": (8, CODE_8),
    "reserved": (9, "Insufficient reserved capacity. Contact customer support to increase your reservation."),
    "preempted": (3, "Cloud TPU received a bad request. update is not supported while in state PREEMPTED"),
    "internal": (13, "an internal error has occurred"),
    "quota": (8, "Quota 'TPUV5sPreemptibleLitepodPerProjectPerZoneForTPUAPI' exhausted. Limit 0 in zone {zone}"),
    "region-quota": (8, "Quota 'TPUV5sPreemptibleLitepodPerProjectPerRegionForTPUAPI' exhausted. Limit 0 in region {region}"),
    "permission": (7, "Permission 'tpu.nodes.create' denied on 'projects/tpuctl-test/locations/{zone}/nodes/hunt'"),
}
SPOT, ON_DEMAND = Capacity("spot"), Capacity("on-demand")
FLEX, RESERVATION = Capacity("flex-start"), Capacity("reserved", "my-reservation")
FLEX_BASE = replace(BASE, max_run_duration="2h")  # create checks flex-start's run duration before any hunt


@dataclass
class ZonedApi:
    """The TPU API as a hunt sees it: per zone, the creates' scripted endings ("ok" when none is left)."""

    project: str = PROJECT
    nodes: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    endings: dict[str, list[str]] = field(default_factory=dict)  # zone -> STOCKOUTS keys, "stuck" or "interrupt"
    pending: dict[tuple[str, str], str] = field(default_factory=dict)  # (zone, operation) -> how it ends
    calls: list[str] = field(default_factory=list)
    interrupt_deletes: bool = False  # a second Ctrl-C while the interrupted try is being deleted
    queued: dict[tuple[str, str], Queued] = field(default_factory=dict)  # queued resources, as get_queued reads them
    queue_endings: dict[str, list[str]] = field(default_factory=dict)  # zone -> "waiting", "active", "interrupt" or a STOCKOUTS key
    queued_deletes_fail: bool = False
    clock: list[float] = field(default_factory=lambda: [0.0])

    def get_node(self, zone: str, name: str) -> Node | None:
        self.clock[0] += 1.0
        found = self.nodes.get((zone, name))
        return None if found is None else Node(dict(found), zone)

    def create_node(self, zone: str, name: str, resource: dict[str, Any]) -> str | None:
        self.calls.append(f"create {zone} {resource.get('acceleratorType')} spot={bool(resource.get('schedulingConfig', {}).get('spot'))}")
        if (zone, name) in self.nodes:
            return None
        ending = (self.endings.get(zone) or ["ok"]).pop(0)
        path = f"projects/{self.project}/locations/{zone}/nodes/{name}"
        if ending != "permission":  # a refused permission makes no node
            self.nodes[(zone, name)] = {"name": path, "state": "PREEMPTED" if ending == "preempted" else "CREATING", **resource}
        if ending == "interrupt":
            raise KeyboardInterrupt
        operation = f"operations/create-{len(self.calls)}"
        self.pending[(zone, operation)] = ending
        return operation

    def operation(self, zone: str, name: str) -> Operation:
        ending = self.pending.get((zone, name), "ok")
        if ending == "late-internal":  # the internal error ends the operation only after a while (time passes)
            time.sleep(1.0)
            ending = "internal"
        if ending == "stuck":
            return Operation(done=False)
        if ending == "ok":
            node = self.nodes.get((zone, "hunt"))
            if node is not None:
                node.update(state="READY", health="HEALTHY")
            return Operation(done=True)
        code, message = STOCKOUTS[ending]
        return Operation(True, code, message.format(zone=zone, region=zone.rsplit("-", 1)[0]))

    def delete_node(self, zone: str, name: str) -> str | None:
        self.calls.append(f"delete {zone}")
        if self.interrupt_deletes:
            raise KeyboardInterrupt
        return None if self.nodes.pop((zone, name), None) is None else "operations/delete"

    def stop_node(self, zone: str, name: str) -> str | None:
        raise AssertionError("a hunt never stops a node")

    def start_node(self, zone: str, name: str) -> str | None:
        raise AssertionError("a hunt never starts a node")

    def create_queued(self, zone: str, resource_id: str, resource: dict[str, Any]) -> bool:
        """A queued request ends as scripted: stays WAITING_FOR_RESOURCES, becomes ACTIVE with its node READY, or
        FAILED with a STOCKOUTS error (failedData.error, as the TPU API reports it)."""
        self.calls.append(f"queue {zone} {sorted(resource)}")
        ending = (self.queue_endings.get(zone) or ["active"]).pop(0)
        self.queued[(zone, resource_id)] = Queued("WAITING_FOR_RESOURCES")
        if ending == "interrupt":
            raise KeyboardInterrupt
        if ending == "active":
            self.queued[(zone, resource_id)] = Queued("ACTIVE")
            node = resource["tpu"]["nodeSpec"][0]["node"]
            path = f"projects/{self.project}/locations/{zone}/nodes/{resource_id}"
            self.nodes[(zone, resource_id)] = {**node, "name": path, "state": "READY", "health": "HEALTHY", "queuedResource": resource_id}
        elif ending != "waiting":
            code, message = STOCKOUTS[ending]
            self.queued[(zone, resource_id)] = Queued("FAILED", code, message.format(zone=zone))
        return True

    def get_queued(self, zone: str, resource_id: str) -> Queued | None:
        self.clock[0] += 1.0
        found = self.queued.get((zone, resource_id))
        return None if found is None else replace(found, resource_id=resource_id, node_ids=(resource_id,))  # tpuctl's: one node of its id

    def delete_queued(self, zone: str, resource_id: str) -> None:
        self.calls.append(f"delete queued {zone}")
        if self.queued_deletes_fail:
            raise TpuctlError(f"Permission 'tpu.queuedresources.delete' denied in {zone}")
        self.queued.pop((zone, resource_id), None)
        self.nodes.pop((zone, resource_id), None)  # force: the node it holds goes with it


def zones(*names: str, kind: Capacity = SPOT, accelerator_type: str = "v5litepod-16") -> list[Candidate]:
    return [Candidate(accelerator_type, kind, zone, 7.28) for zone in names]


def memory(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "state" / "tpuctl" / "stockouts.json"
    return json.loads(path.read_text()) if path.exists() else []


def saved(zone: str) -> NodeSpec | None:
    return nodespec.load(PROJECT, zone, "hunt")


# --- a run's own VM (launch --new-tpu) ------------------------------------------------------------

RUN = "20261128-142640-train-ab12"


class Log:
    """The run's VM events as the test reads them: each event's kind and the one fact it is checked for."""

    def __init__(self) -> None:
        self.said: list[tuple[str, Any]] = []

    def hear(self, event: VmEvent) -> None:
        fact = {Hunting: lambda e: len(e.tries), Recreating: lambda e: e.why, Ended: lambda e: e.how}.get(type(event), lambda e: e.spec.zone)
        self.said.append((type(event).__name__.lower(), fact(event)))


def run_vm(api: FakeApi, run_id: str = RUN, max_preemptions: int = 10, say: Callable[[str], None] = lambda line: None) -> tuple[RunVm, Log]:
    plan = Plan(["v4-8"], [Capacity("on-demand")], [ZONE], settings.resolve({"project": api.project, "zone": ZONE}), None)
    log = Log()
    vm = RunVm(api, run_id, Wanted(plan, None, max_preemptions), log.hear, say, sleep=no_sleep)
    vm.spec = NodeSpec(vm.name, api.project, ZONE, "tpu-ubuntu2204-base", "v4-8", labels={LABEL_KEY: label_value(run_id)})
    nodespec.save(vm.spec)
    return vm, log
