"""The provisioning of a launch on a TPU VM of its own (`launch --new-tpu TYPE`): the Provisioner, and what it writes down.

The VM is hunted and created when the run starts (tpuctl/cloud/capacity/run_vm.py), the workers then run on every
host of it exactly as `--tpu NAME` runs them (the ssh backend's run, handed the hosts by the launch's provisioning
step: execute.py), a preemption recreates it before the next attempt, and the run's end deletes it — succeeded,
failed, stopped, or a launch that failed between the create and the first worker — unless --keep, or
--keep-on-failure on a failed run. `NewTpu` is the Provisioner the ssh backend names for that step
(SshRunner.provisioner); the backend's supervisor asks it for the hosts again after a preemption (`down`,
`hosts_again`: the questions --tpu's slice answers too).

What happens to the VM goes into the run's record the moment it happens (its name while it is still CREATING, its
zone after a recreate, its fate at the end: `runs` and `stop` read them) and into its timeline: RunVm tells it as
typed events to one sink, `VmJournal`, the one owner of the run's VM state while the launch runs: each event becomes
the next `VmRecord` by its transitions (runs/vm_record.py), written into the run's record at once (a launcher killed
the next moment leaves a record naming the VM), and a line of its timeline (the report's provisioning, stockout
hunting and preemption recovery: runs/goodput.py).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from tpuctl.cloud.capacity import recovery
from tpuctl.cloud.capacity.candidates import Plan, parse_types
from tpuctl.cloud.capacity.run_vm import Creating, Ended, Hunting, Provisioned, Recreated, Recreating, RunVm, VmEvent, Wanted, node_name
from tpuctl.cloud.nodes.creating import Naming
from tpuctl.cloud.nodes.health import down_now, wait_ready_again
from tpuctl.cloud.nodes.nodespec import NodeSpec
from tpuctl.cloud.nodes.slice_hosts import slice_hosts
from tpuctl.cloud.nodes.tpu import TpuApi
from tpuctl.cluster import worker_contract as contract
from tpuctl.cluster.hosts import HostEntry
from tpuctl.endings import INTERRUPTED, Kind
from tpuctl.inputs.errors import TpuctlError
from tpuctl.launch.runner import Provisioner, RunContext
from tpuctl.launch.tfpair import choice, pair
from tpuctl.launch.tfpair.here import this_interpreter
from tpuctl.runs import timeline as tl
from tpuctl.runs.vm_record import NodeState, VmRecord, node_end
from tpuctl.safety import signals
from tpuctl.settings import cloud as settings
from tpuctl.tpu.accelerators import shape_of
from tpuctl.tpu.capacity import FLEX_START, ON_DEMAND, parse_capacities

if TYPE_CHECKING:
    from tpuctl.cloud.nodes.node import Node
    from tpuctl.launch.job import Job


class Asked(Protocol):
    """The ssh backend's options a --new-tpu launch reads (runner.Options has them)."""

    @property
    def new_tpu(self) -> str | None: ...
    @property
    def project(self) -> str | None: ...
    @property
    def tpu_zone(self) -> str | None: ...
    @property
    def zones(self) -> str | None: ...
    @property
    def capacity(self) -> str | None: ...
    @property
    def recovery(self) -> str | None: ...
    @property
    def keep(self) -> bool: ...
    @property
    def keep_on_failure(self) -> bool: ...
    @property
    def internal_ip(self) -> bool: ...


def no_flex_start(source: str) -> TpuctlError:
    """The refusal of flex-start for a run's own VM. The service deletes a flex-start slice when its run duration ends
    (https://cloud.google.com/tpu/docs/request-using-flex-start), and a run's recovery cannot make it again within the
    run: the new request queues for capacity again, for another duration. A VM the user makes runs the launch instead."""
    where = "--capacity" if source == "--capacity" else f"the capacity setting from {source}"
    return TpuctlError(
        f"--new-tpu cannot use flex-start ({where}): the service deletes a flex-start slice when its run duration ends, "
        "and the run's recovery cannot recreate it within the run",
        hint="make one and launch on it: `tpuctl create NAME --flex-start --max-run-duration D`, then `tpuctl launch --tpu NAME ...`",
    )


def keeps(ended: Kind | None, keep: bool, keep_on_failure: bool) -> bool:
    """Whether the run's VM outlives the run: always with --keep; with --keep-on-failure when the run failed (any end
    but succeeded and stopped: a hang, a lost worker, tpuctl's own error, preemptions past the limit). None: the launch
    itself failed before the workers could say anything, a failure too."""
    if keep:
        return True
    return keep_on_failure and ended not in (Kind.SUCCEEDED, Kind.STOPPED)


class NewTpu(Provisioner):
    """The slice behind --new-tpu: its hosts once the VM is READY (placeholders until then, one per host of the type,
    for the plan and the dry run), looked at and recreated after a preemption, deleted or kept at the end."""

    def __init__(self, options: Asked) -> None:
        assert options.new_tpu is not None
        self.options = options
        types = parse_types(options.new_tpu)
        hosts = {name: shape_of(name).hosts for name in types}
        if len(set(hosts.values())) > 1:
            said = ", ".join(f"{name} has {count}" for name, count in hosts.items())
            raise TpuctlError(f"--new-tpu types must have as many hosts as each other (the launch is planned for them): {said}")
        flags = {"project": options.project, "zone": options.tpu_zone, "zones": options.zones, "capacity": options.capacity, "recovery": options.recovery}
        self.flags = {key: value for key, value in flags.items() if value is not None}
        resolved = settings.resolve(self.flags)
        capacities = parse_capacities(resolved.get("capacity") or ON_DEMAND)
        if any(capacity.kind == FLEX_START for capacity in capacities):
            raise no_flex_start(resolved.source("capacity"))
        across = resolved.given("zones") and not options.tpu_zone
        zones = settings.zones_of(resolved.require("zones")) if across else [resolved.zone]
        self.plan = Plan(types, capacities, zones, resolved, None)
        self.images = choice.images_for(types, resolved, this_interpreter())  # each type's image and why (tfpair/choice.py)
        self.framework = contract.TENSORFLOW  # the job's, once pair_for has seen it: a JAX run's types take JAX's images
        self.pair: list[str] = []  # the TensorFlow pair's lines (pair_for), said before the hunt
        self.entries = [HostEntry(f"new-tpu-host-{index}") for index in range(next(iter(hosts.values())))]
        self.name = ""  # the node's, once the run id is known (run_vm.node_name)
        self.vm: RunVm | None = None
        self.journal: VmJournal | None = None  # the run's VM as its record and timeline keep it, once provisioning began

    def wanted(self, job: Job) -> Wanted:
        """The hunt as the launch asks it, and its recovery: where a preempted VM comes back first (the recovery setting,
        else its kind's default) and as often as the run's --max-preemptions allows. A gs:// --model-dir ranks zones by
        their distance to its bucket, as the model-dir setting does for `tpuctl create --zones` (candidates.offers)."""
        plan = self.plan
        if job.model_dir and job.model_dir.startswith("gs://"):
            plan = replace(plan, resolved=settings.resolve({**self.flags, "model_dir": job.model_dir}))
        resolved = plan.resolved
        image = resolved.get("runtime-version") if resolved.given("runtime-version") else None
        images = {name: chosen.name for name, chosen in self.images.items()}
        return Wanted(plan, image, job.max_preemptions, recovery.asked(resolved), float(resolved.require("create-deadline")), images)

    def pair_for(self, job: Job) -> list[str]:
        """This machine's TensorFlow beside the first type's image (tfpair/pair.py), for the script as it is here; kept to
        say before the hunt. A fallback type's own image is in the dry run's JSON and the hunt's line for it. A JAX run's
        types take JAX's images instead (tfpair/choice.py), chosen here, where the launch first shows its job."""
        if job.framework != self.framework:
            self.framework = job.framework
            self.images = choice.images_for(self.plan.types, self.plan.resolved, this_interpreter(), job.framework)
        first = self.plan.types[0]
        chosen = self.images.get(first)
        self.pair = pair.for_launch(job, None if chosen is None else (chosen, first))
        return self.pair

    @property
    def image(self) -> str | None:
        """The runtime image the VM is asked for: the runtime-version setting, else its types' TensorFlow image where they
        share one (settings.default_runtime, as the create picks it), a JAX run's JAX image; None where that is not one image."""
        if self.plan.resolved.given("runtime-version"):
            return self.plan.resolved.get("runtime-version")
        jax = self.framework == contract.JAX
        images = {chosen.name for chosen in self.images.values()} if jax else {settings.default_runtime(name) for name in self.plan.types}
        return images.pop() if len(images) == 1 else None

    def cost(self, notice: Callable[[str], None]) -> VmRecord | None:
        return None  # no VM yet: the record is told its type, zone and price the moment the create is accepted

    def describe(self, run_id: str) -> dict[str, object]:
        """What a dry run says of the VM: its name, the hunt, where a preempted one comes back first, what happens at the end."""
        end = "kept" if self.options.keep else "kept if the run fails, deleted otherwise" if self.options.keep_on_failure else "deleted"
        zones = "every zone" if self.plan.zones is None else ",".join(self.plan.zones)
        policy = self.plan.resolved.get("recovery") or recovery.DEFAULTS
        made = {"name": node_name(run_id), "types": self.plan.types, "capacity": [str(c) for c in self.plan.capacities], "zones": zones}
        images = {name: {"image": chosen.name, "why": chosen.why} for name, chosen in self.images.items()}
        return {**made, "recovery": policy, "at_end": end, "images": images}

    def machine(self, run_id: str) -> str:
        return f"TPU VM {node_name(run_id)}"

    def provision(self, job: Job, context: RunContext) -> list[HostEntry]:
        """The VM hunted and created, and its hosts once it is READY; what happens to it goes to the run's record and
        timeline as it happens (VmJournal)."""
        for line in self.pair:  # before anything is created or billed
            context.notice(line)
        self.journal = VmJournal(context, node_end(self.options.keep, self.options.keep_on_failure))
        self.vm = RunVm(TpuApi.connect(self.plan.resolved), context.run_id, self.wanted(job), self.journal.hear, context.notice)
        self.name = self.vm.name
        self.entries = self._hosts(self.vm.provision())
        return self.entries

    def _hosts(self, node: Node) -> list[HostEntry]:
        return [HostEntry(host.address(self.options.internal_ip)) for host in slice_hosts(node)]

    def finish(self, ended: Kind | None, context: RunContext) -> None:
        """Delete the VM (or keep it), in one line; the step ignores stopping signals meanwhile, so none cuts it short."""
        vm, journal = self.vm, self.journal
        if vm is None or journal is None:
            return  # nothing was asked of the API: the connection to it failed
        try:
            if keeps(ended, self.options.keep, self.options.keep_on_failure):
                line = vm.keep("--keep" if self.options.keep else "--keep-on-failure: the run failed")
            else:
                # The node the record names; a record that could not be written leaves this launch the witness of
                # what it created (it holds the run's folder): the node's label is checked either way.
                line = vm.delete(journal.vm.created_node if context.record is not None else vm.name)
        except TpuctlError as err:
            spec = vm.spec
            where = f" --zone {spec.zone}" if spec is not None else ""
            line = f"could not delete TPU VM {vm.name}: {err.message}; it may bill until deleted: tpuctl delete {vm.name}{where}"
        context.notice(line)

    def down(self) -> str | None:
        """The node's condition if it is not READY and HEALTHY now; None when it is, or when the API cannot tell."""
        vm = self.vm
        if vm is None or vm.spec is None:
            return None
        try:
            return down_now(vm.api, vm.spec.zone, vm.name)
        except (TpuctlError, OSError):
            return None  # cannot tell: the lost connection stays a failure

    def hosts_again(self, notice: Callable[[str], None]) -> list[HostEntry]:
        """After a preemption: a node that is lost (PREEMPTED, TERMINATED, gone) is recreated, one that is only not READY
        yet is waited for (babysit's wait); then its hosts as they are now. A stopping signal ends it with 130."""
        vm = self.vm
        assert vm is not None and vm.spec is not None
        with signals.handled(signals.raise_stopped):
            try:
                why = vm.down()
                node = vm.recreate(why) if why else wait_ready_again(vm.api, vm.spec.zone, vm.name, notice)
            except signals.Stopped as stopped:
                notice(f"received {signal.Signals(stopped.signum).name}; no longer waiting for TPU VM {vm.name}")
                raise TpuctlError(f"interrupted while bringing back TPU VM {vm.name}", exit_code=INTERRUPTED) from None
        self.entries = self._hosts(node)
        notice(f"TPU VM {vm.name}'s hosts are now " + ", ".join(entry.host for entry in self.entries))
        return self.entries


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
