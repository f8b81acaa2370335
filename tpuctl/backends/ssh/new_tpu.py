"""`launch --new-tpu TYPE`: the run's own TPU VM around a `--tpu NAME` launch.

The VM is hunted and created when the run starts (tpuctl/cloud/capacity/run_vm.py), the workers then run on every
host of it exactly as `--tpu NAME` runs them (the ssh backend's run, its hosts from the node), a preemption recreates
it before the next attempt, and the run's end deletes it — succeeded, failed, stopped, or a launch that failed between
the create and the first worker — unless --keep, or --keep-on-failure on a failed run. What happens to the VM goes
into the run's record the moment it happens (its name while it is still CREATING, its zone after a recreate, its fate
at the end: `runs` and `stop` read them) and into its timeline: the provisioner (RunVm) tells it as typed events, which
the launch's provisioning step writes down (launch/provisioning.py). NewTpu is that step for the ssh backend: it hands
the backend's run the VM's hosts once it is READY, and again after a recreate.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import replace
from types import FrameType
from typing import TYPE_CHECKING, Protocol

from tpuctl.cloud.capacity import recovery
from tpuctl.cloud.capacity.candidates import Plan, parse_types
from tpuctl.cloud.capacity.run_vm import RunVm, Wanted, node_name
from tpuctl.cloud.nodes.health import down_now, wait_ready_again
from tpuctl.cloud.nodes.slice_hosts import slice_hosts
from tpuctl.cloud.nodes.tpu import TpuApi
from tpuctl.cluster.hosts import HostEntry
from tpuctl.endings import INTERRUPTED, Kind
from tpuctl.inputs.errors import TpuctlError
from tpuctl.launch.provisioning import VmJournal
from tpuctl.runs.vm_record import node_end
from tpuctl.safety import signals
from tpuctl.settings import cloud as settings
from tpuctl.tpu.accelerators import shape_of
from tpuctl.tpu.capacity import FLEX_START, ON_DEMAND, parse_capacities

if TYPE_CHECKING:
    from tpuctl.cloud.nodes.node import Node
    from tpuctl.launch.job import Job
    from tpuctl.launch.outcome import Outcome
    from tpuctl.launch.runner import RunContext
    from tpuctl.runs.vm_record import VmRecord


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


class NewTpu:
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
        self.entries = [HostEntry(f"new-tpu-host-{index}") for index in range(next(iter(hosts.values())))]
        self.name = ""  # the node's, once the run id is known (run_vm.node_name)
        self.vm: RunVm | None = None

    def wanted(self, job: Job) -> Wanted:
        """The hunt as the launch asks it, and its recovery: where a preempted VM comes back first (the recovery setting,
        else its kind's default) and as often as the run's --max-preemptions allows. A gs:// --model-dir ranks zones by
        their distance to its bucket, as the model-dir setting does for `tpuctl create --zones` (candidates.offers)."""
        plan = self.plan
        if job.model_dir and job.model_dir.startswith("gs://"):
            plan = replace(plan, resolved=settings.resolve({**self.flags, "model_dir": job.model_dir}))
        resolved = plan.resolved
        image = resolved.get("runtime-version") if resolved.given("runtime-version") else None
        return Wanted(plan, image, job.max_preemptions, recovery.asked(resolved), float(resolved.require("create-deadline")))

    def cost(self, notice: Callable[[str], None]) -> VmRecord | None:
        return None  # no VM yet: the record is told its type, zone and price the moment the create is accepted

    def describe(self, run_id: str) -> dict[str, object]:
        """What a dry run says of the VM: its name, the hunt, where a preempted one comes back first, what happens at the end."""
        end = "kept" if self.options.keep else "kept if the run fails, deleted otherwise" if self.options.keep_on_failure else "deleted"
        zones = "every zone" if self.plan.zones is None else ",".join(self.plan.zones)
        policy = self.plan.resolved.get("recovery") or recovery.DEFAULTS
        made = {"name": node_name(run_id), "types": self.plan.types, "capacity": [str(c) for c in self.plan.capacities], "zones": zones}
        return {**made, "recovery": policy, "at_end": end}

    def run(self, job: Job, context: RunContext, body: Callable[[list[HostEntry]], Outcome]) -> Outcome:
        """Provision the VM, hand `body` its hosts, then delete or keep it however the run ended."""
        journal = VmJournal(context, node_end(self.options.keep, self.options.keep_on_failure))
        vm = RunVm(TpuApi.connect(self.plan.resolved), context.run_id, self.wanted(job), journal.hear, context.notice)
        self.vm, self.name = vm, vm.name
        ended: Kind | None = None
        # A stopping signal ends the run, however far it got, with its VM deleted: it raises Stopped from the first
        # create to the run's end, save while the supervisor routes signals its own way (it stops the workers), and is
        # ignored once the end has begun. Nowhere between is SIGTERM's default left, which kills this process
        # before the delete (the gap between READY and the supervisor: --cleanup, the hosts' preflight).
        stopping = [True]

        def on_signal(signum: int, frame: FrameType | None) -> None:
            if stopping[0]:
                raise signals.Stopped(signum)

        with signals.handled(on_signal):
            try:
                node: Node | None = None
                try:
                    node = vm.provision()
                    self.entries = self._hosts(node)
                    outcome = body(self.entries)
                except (KeyboardInterrupt, signals.Stopped) as stopped:
                    ended = Kind.STOPPED
                    doing = f"creating TPU VM {vm.name}" if node is None else f"running on TPU VM {vm.name}"
                    context.notice(f"received {_name(stopped)}; no longer {doing}")
                    raise TpuctlError(f"interrupted while {doing} for the run", exit_code=INTERRUPTED) from None
                ended = outcome.ending.kind
                return outcome
            except TpuctlError as err:
                ended = Kind.STOPPED if err.exit_code == INTERRUPTED else ended
                raise
            finally:
                stopping[0] = False
                self._end(vm, ended, context, journal)

    def _hosts(self, node: Node) -> list[HostEntry]:
        return [HostEntry(host.address(self.options.internal_ip)) for host in slice_hosts(node)]

    def _end(self, vm: RunVm, ended: Kind | None, context: RunContext, journal: VmJournal) -> None:
        """Delete the VM (or keep it), in one line; the caller ignores stopping signals meanwhile, so none cuts it short."""
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
                notice(f"received {_name(stopped)}; no longer waiting for TPU VM {vm.name}")
                raise TpuctlError(f"interrupted while bringing back TPU VM {vm.name}", exit_code=INTERRUPTED) from None
        self.entries = self._hosts(node)
        notice(f"TPU VM {vm.name}'s hosts are now " + ", ".join(entry.host for entry in self.entries))
        return self.entries


def _name(stopped: BaseException) -> str:
    return signal.Signals(stopped.signum).name if isinstance(stopped, signals.Stopped) else "SIGINT"

