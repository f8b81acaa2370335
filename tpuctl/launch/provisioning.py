"""The provisioning step of a launch on a VM of its own (`launch --new-tpu`): what its provisioner tells is written down.

The provisioner (tpuctl/cloud/capacity/run_vm.py: it hunts, creates, recreates and deletes the run's VM, and hands the
ssh backend its hosts) tells what happens as typed events. `VmJournal` is the one owner of the run's VM state while
the launch runs: each event becomes the next `VmRecord` by its transitions (runs/vm_record.py), written into the run's
record at once (a launcher killed the next moment leaves a record naming the VM), and a line of its timeline (the
report's provisioning, stockout hunting and preemption recovery: runs/goodput.py).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from tpuctl.cloud.capacity.run_vm import Creating, Ended, Hunting, Provisioned, Recreated, Recreating, VmEvent
from tpuctl.cloud.nodes.creating import Naming
from tpuctl.cloud.nodes.nodespec import NodeSpec
from tpuctl.launch.runner import RunContext
from tpuctl.runs import timeline as tl
from tpuctl.runs.vm_record import NodeState, VmRecord


class VmJournal:
    """The run's VM as its record and timeline keep it; `hear` is the provisioner's one sink. `at_end`: what the
    launch will do with the VM as the run ends (vm_record.node_end), which the report says while it runs."""

    def __init__(self, context: RunContext, at_end: str) -> None:
        self.context, self.at_end = context, at_end
        self.vm = VmRecord()  # no VM named yet: the record of a --new-tpu run starts without one

    def hear(self, event: VmEvent) -> None:
        if isinstance(event, Hunting):
            self._event(tl.PROVISION_BEGIN, types=",".join(event.types), candidates=len(event.tries))
        elif isinstance(event, Naming):
            spec = event.spec
            self._write(self.vm.naming(spec.name, spec.project, spec.zone, self.at_end))
        elif isinstance(event, Creating):
            self._write(self._priced(event.spec, event.usd_per_hour, event.note))
            spec = event.spec
            self._event(tl.NODE_CREATE, node=spec.name, zone=spec.zone, type=spec.accelerator(), capacity=spec.capacity())
        elif isinstance(event, Provisioned):
            self._write(self.vm.ready())
            hunted = sum(t.seconds for t in event.tried)
            said = [f"{t.candidate}: {t.why}" for t in event.tried[:20]]
            priced = {"capacity": event.spec.capacity(), "price_per_hour": event.usd_per_hour}  # what each attempt on it is priced at (runs/goodput.py)
            self._event(tl.PROVISION_END, node=event.spec.name, zone=event.spec.zone, hunting_s=round(hunted, 3), tried=said, **priced)
        elif isinstance(event, Recreating):
            now, record = time.time(), self.context.record  # its start: the VM's own value is this journal's, never a stale copy's
            cost = replace(record, vm=self.vm).cost(now) if record is not None else None
            self._write(self.vm.recreating(cost, now))  # the attempt on this VM ends at its price
            self._event(tl.RECREATE_BEGIN, node=event.spec.name, zone=event.spec.zone, condition=event.why)
        elif isinstance(event, Recreated):
            self._write(self._priced(event.spec, event.usd_per_hour, event.note).ready())
            spec = event.spec
            self._event(tl.RECREATE_END, node=spec.name, zone=spec.zone, capacity=spec.capacity(), price_per_hour=event.usd_per_hour)
        elif isinstance(event, Ended):
            self._write(self.vm.ended(NodeState(event.how)))
            self._event(tl.NODE_DELETE, node=event.spec.name, zone=event.spec.zone, fate=self.vm.node_fate)

    def _priced(self, spec: NodeSpec, usd: float | None, note: str | None) -> VmRecord:
        return self.vm.priced(spec.accelerator(), spec.zone, spec.capacity(), usd, note)

    def _write(self, vm: VmRecord) -> None:
        self.vm = vm
        if self.context.amend_record is not None:
            self.context.amend_record(vm=vm)

    def _event(self, name: str, **fields: Any) -> None:
        if self.context.timeline is not None:
            self.context.timeline.event(name, **fields)
