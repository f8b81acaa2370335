"""The ssh backend: workers on other hosts (--hosts, --hostfile, or every host of a TPU slice, --tpu).

This module declares the options and shapes the Job (how many workers the
hosts' slots give, the script and model dir as the hosts see them); the ssh
machinery itself loads only when a launch really goes over ssh.
"""

from __future__ import annotations

import os
import shlex
import signal
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar

import click

from tpuctl import __version__
from tpuctl.cluster.hosts import HostEntry, format_address, parse_slot_hosts, read_hostfile
from tpuctl.endings import exit_words
from tpuctl.inputs.errors import FAILED, TpuctlError, one_line
from tpuctl.launch import shared_options
from tpuctl.launch.option_fields import option
from tpuctl.launch.runner import BackendOptions, Runner
from tpuctl.ssh.connection import Connection

if TYPE_CHECKING:
    from tpuctl.backends.ssh.environment.spec import EnvSpec
    from tpuctl.backends.ssh.placement import RemotePaths
    from tpuctl.backends.ssh.selection import Selection
    from tpuctl.cloud.nodes.tpu import TpuApi
    from tpuctl.inputs.requirements import Requirements
    from tpuctl.launch.job import Job
    from tpuctl.launch.outcome import Outcome
    from tpuctl.launch.process.plan import Plan
    from tpuctl.launch.provisioning import NewTpu
    from tpuctl.launch.runner import Provisioner, RunContext
    from tpuctl.runs.vm_record import VmRecord
    from tpuctl.ssh.shipment import Shipment

SYNC_LIMIT_ENV = "TPUCTL_SYNC_LIMIT"


class SizeText(click.ParamType):  # type: ignore[type-arg]  # generic only from click 8.2; pyproject allows 8.1
    """A size as --sync-limit takes it (tpuctl.inputs.parse.parse_size), checked and kept as text, so a [launch] table
    gives it as a TOML string and a bad one is refused naming the file, as the flag would be."""

    name = "SIZE"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> str:
        from tpuctl.inputs.parse import parse_size

        try:
            parse_size(str(value), "size")
        except TpuctlError as err:
            self.fail(err.message + (f" ({err.hint})" if err.hint else ""), param, ctx)
        return str(value)


@dataclass(frozen=True)
class Options(Connection, BackendOptions):
    """Where the workers run over ssh, and how the launch prepares the hosts."""

    misplaced: ClassVar[str] = "{flag} is for launches over ssh: add --hosts, --hostfile, --tpu or --new-tpu"

    ssh_hosts: str | None = option(
        "--hosts",
        metavar="H1,H2[:SLOTS]",
        help="Run the workers on these hosts over ssh; HOST:N runs N workers on HOST (default 1). Workers fill the slots in order.",
    )
    ssh_hostfile: str | None = option(
        "--hostfile", type=click.Path(dir_okay=False), help="Hosts for ssh, one 'HOST [slots=N]' per line, # comments (DeepSpeed/horovod format)."
    )
    sync: bool | None = option(
        "--sync/--no-sync",
        default=None,
        help="Copy the script's folder to every host first (rsync; skips unchanged files), "
        "less what .gitignore and .tpuctlignore exclude (in a git checkout: the files `git ls-files` lists).  "
        "[default: on for a TPU VM tpuctl made (--new-tpu, or --tpu on one that `tpuctl create` or a run made) unless --remote-dir is given; off otherwise]",
    )
    sync_limit: str | None = option(
        "--sync-limit",
        type=SizeText(),
        metavar="SIZE",
        config=True,
        help="With --sync: refuse to send more than SIZE to each host, e.g. 500M, 2GiB [env TPUCTL_SYNC_LIMIT].  [default: 1GiB]",
    )
    sync_large: bool = option("--sync-large", is_flag=True, default=False, help="With --sync: send the folder even above --sync-limit.")
    tpu_name: str | None = option("--tpu", metavar="NAME", help="Run on every host of this TPU VM slice (hosts from the Cloud TPU API).")
    new_tpu: str | None = option(
        "--new-tpu",
        metavar="TYPE[,TYPE2]",
        help="Create a TPU VM for this run (hunting --zones and --capacity, prices shown first), run on every host of it, "
        "recreate it after a preemption and delete it when the run ends (docs/managed-runs.md). Each Google API call gives up after "
        "the api-timeout setting's seconds left unanswered [env TPUCTL_API_TIMEOUT; default 60].",
    )
    zones: str | None = option("--zones", metavar="Z1,Z2|all", help="With --new-tpu: the zones to hunt across, best first [env TPUCTL_ZONES].")
    capacity: str | None = option(
        "--capacity",
        metavar="KIND[,KIND2]",
        help="With --new-tpu: the capacity kinds to try in order (on-demand, spot, preemptible, reserved[=NAME]), e.g. spot,on-demand [env TPUCTL_CAPACITY].",
    )
    recovery: str | None = option(
        "--recovery",
        metavar="POLICY",
        help="With --new-tpu: where a preempted VM is made again first, same-zone-first (its own zone, then the hunt) or elsewhere-first "
        "(the hunt, its own zone last); each recreation spends one of --max-preemptions [env TPUCTL_RECOVERY].  "
        "[default: elsewhere-first for spot and preemptible, same-zone-first otherwise]",
    )
    keep: bool = option("--keep", is_flag=True, default=False, help="With --new-tpu: keep the TPU VM when the run ends.")
    keep_on_failure: bool = option(
        "--keep-on-failure", is_flag=True, default=False, help="With --new-tpu: keep the TPU VM of a failed run, to look at it (the end says how to delete it)."
    )
    project: str | None = shared_options.project()
    tpu_zone: str | None = option("--zone", metavar="ZONE", help="With --tpu or --new-tpu: the zone [env TPUCTL_ZONE].")
    internal_ip: bool = option("--internal-ip", is_flag=True, default=False, help="With --tpu: connect to the hosts' internal IPs (from inside the VPC).")
    cleanup: bool = option(
        "--cleanup", is_flag=True, default=False, help="First, on every host: kill stale processes holding the TPU, remove /tmp/libtpu_lockfile."
    )
    remote_dir: str | None = option(
        "--remote-dir", metavar="DIR", help="Working directory on the hosts.  [default: this directory's path; ~/tpuctl/work/NAME-HASH on a VM tpuctl made]"
    )

    @classmethod
    def implied_by(cls, params: Mapping[str, Any]) -> str | None:
        """--hosts, --hostfile, --tpu and --new-tpu mean --backend ssh."""
        if params.get("tpu_name") is not None:
            return f"TPU VM {params['tpu_name']}"
        if params.get("new_tpu") is not None:
            return "--new-tpu"
        if params.get("ssh_hosts") is not None:
            return "--hosts"
        return None if params.get("ssh_hostfile") is None else str(params["ssh_hostfile"])


class TpuSlice:
    """The TPU VM behind --tpu: every host of it, one worker each (TPUStrategy runs the same
    program on all of them), looked up before the launch and again after a preemption."""

    def __init__(self, options: Options) -> None:
        from tpuctl.cloud.nodes.node_lookup import find_node

        assert options.tpu_name is not None
        self.options = options
        self.node = find_node(options.tpu_name, "`tpuctl list` shows the nodes", options.project, options.tpu_zone, None, None)
        self.entries = self._entries()

    @property
    def image(self) -> str | None:
        return self.node.runtime_version or None

    def pair_for(self, job: Job) -> list[str]:
        """This machine's TensorFlow beside the node's image (tfpair/pair.py), for the script as it is here."""
        from tpuctl.launch.tfpair.pair import Image, for_launch

        return for_launch(job, (Image(self.node.runtime_version, f"node {self.node.name}'s image"), self.node.accelerator))

    def _entries(self) -> list[HostEntry]:
        from tpuctl.cloud.nodes.slice_hosts import slice_hosts

        return [HostEntry(host.address(self.options.internal_ip)) for host in slice_hosts(self.node)]

    def _api(self) -> TpuApi:
        from tpuctl.cloud.nodes.tpu import TpuApi
        from tpuctl.settings import cloud as settings

        flags = {"project": self.options.project, "zone": self.node.zone, "credentials": None, "access_token_file": None}
        return TpuApi.connect(settings.resolve(flags))

    def cost(self, notice: Callable[[str], None]) -> VmRecord:
        """What the run's record keeps to price it: the node's type, zone and kind, and its slice's list price now
        (tpuctl/cloud/capacity/prices.py: the catalogue, else the dated table, said as such). A reserved node is billed by its
        reservation: no list price. Prices that cannot be had at all cost the record its price, never the launch; a slow
        read says so to `notice`."""
        from tpuctl.cloud.capacity.prices import price_book
        from tpuctl.runs.vm_record import VmRecord

        node = self.node
        if node.reserved:
            return VmRecord(node.accelerator, node.zone, "reserved", None, "billed by its reservation, not at a list price")
        try:
            api = self._api()
            book = price_book(api.settings, api.bearer_token, waiting=notice)
        except (TpuctlError, OSError) as err:
            return VmRecord(node.accelerator, node.zone, node.capacity, None, one_line(f"prices could not be read: {err}", 300))
        usd = book.slice_price(node.accelerator, node.zone, node.capacity)
        return VmRecord(node.accelerator, node.zone, node.capacity, usd, one_line(book.describe(), 300))

    def down(self) -> str | None:
        """The node's condition if it is not READY and HEALTHY now; None when it is, or when the API cannot tell."""
        from tpuctl.cloud.nodes.health import down_now

        try:
            return down_now(self._api(), self.node.zone, self.node.name)
        except (TpuctlError, OSError):
            return None  # cannot tell: the lost connection stays a failure

    def hosts_again(self, notice: Callable[[str], None]) -> list[HostEntry]:
        """After a preemption: wait until the node is READY again (tpuctl.cloud.nodes.babysit), then its
        hosts as they are now. Ctrl-C, SIGTERM or SIGHUP end the wait with 130."""
        from tpuctl.cloud.nodes.health import wait_ready_again
        from tpuctl.endings import INTERRUPTED
        from tpuctl.safety import signals

        name, zone = self.node.name, self.node.zone
        with signals.handled(signals.raise_stopped):
            try:
                api = self._api()
                self.node = wait_ready_again(api, zone, name, notice)
            except signals.Stopped as stopped:
                notice(f"received {signal.Signals(stopped.signum).name}; no longer waiting for TPU VM {name}")
                raise TpuctlError(f"interrupted while waiting for TPU VM {name} to be READY again", exit_code=INTERRUPTED) from None
        before, self.entries = self.entries, self._entries()
        if [entry.host for entry in self.entries] != [entry.host for entry in before]:
            notice(f"TPU VM {name}'s hosts are now " + ", ".join(entry.host for entry in self.entries))
        return self.entries


def _entries(options: Options) -> tuple[list[HostEntry], str, TpuSlice | NewTpu | None]:
    if sum(value is not None for value in (options.ssh_hosts, options.ssh_hostfile, options.tpu_name, options.new_tpu)) > 1:
        raise TpuctlError("give one of --hosts, --hostfile, --tpu, --new-tpu", hint="--tpu NAME runs on a VM that exists; --new-tpu TYPE makes one for the run")
    if options.tpu_name is None and options.new_tpu is None and (options.project or options.tpu_zone or options.internal_ip):
        raise TpuctlError("--project, --zone and --internal-ip are for --tpu NAME or --new-tpu TYPE")
    if options.new_tpu is None and (options.zones or options.capacity or options.recovery or options.keep or options.keep_on_failure):
        raise TpuctlError(
            "--zones, --capacity, --recovery, --keep and --keep-on-failure are for --new-tpu TYPE", hint="`tpuctl create --zones` hunts for a VM you keep"
        )
    if options.new_tpu is not None:
        from tpuctl.launch.provisioning import NewTpu

        if options.tpu_zone and options.zones:  # as `tpuctl create` and `tpuctl offers` refuse the pair
            raise TpuctlError("give --zone or --zones, not both", hint="--zone Z creates in Z alone; --zones hunts across zones")
        made = NewTpu(options)
        return made.entries, "--new-tpu", made
    if options.tpu_name is not None:
        tpu = TpuSlice(options)
        return tpu.entries, f"TPU VM {options.tpu_name}", tpu
    if options.ssh_hosts is not None:
        return parse_slot_hosts(options.ssh_hosts, source="--hosts"), "--hosts", None
    if options.ssh_hostfile is not None:
        return read_hostfile(options.ssh_hostfile, ports=False), options.ssh_hostfile, None
    raise TpuctlError("--backend ssh needs --hosts or --hostfile")


class SshRunner(Runner):
    name = "ssh"

    def __init__(self, options: Options) -> None:
        self.options = options
        self.entries, self.source, self.slice = _entries(options)
        self.ssh = options.ssh_options()
        if options.remote_dir is not None and not options.remote_dir.strip():
            raise TpuctlError("--remote-dir is empty")
        self.paths: RemotePaths | None = None
        self.selection: Selection | None = None  # what --sync sends (selection.py), chosen at prepare()
        self.sync_limit = 0
        self.sync = False  # --sync as the launch runs it (fresh.host_side), decided at prepare()
        self.chosen: list[str] = []  # the defaults a TPU VM tpuctl made got: said by the dry run
        self.warnings: list[str] = []  # laptop paths the hosts may not have: said by the dry run and the run
        self.requirements: Requirements | None = None  # --requirements, read and checked at prepare()
        self.pair: list[str] = []  # this machine's TensorFlow beside the TPU image's (tfpair/pair.py): said by the dry run and the run

    @property
    def slots(self) -> int:
        return sum(entry.slots for entry in self.entries)

    def slice_cost(self, notice: Callable[[str], None]) -> VmRecord | None:
        return self.slice.cost(notice) if self.slice is not None else None

    def provisioner(self) -> Provisioner | None:
        """--new-tpu's VM, which the launch's provisioning step makes before the run and ends after it."""
        return self._new_tpu()

    def prepare(self, job: Job, given: frozenset[str]) -> Job:
        """The worker count, the script path, the model dir and the interpreter as the hosts see them, and what --sync
        sends: everything a launch checks without the hosts, so --new-tpu refuses it before its VM is made. Without an
        explicit --workers the hosts' slots decide how many workers run; on a TPU VM tpuctl made, its own python3, a
        folder under its user's home and --sync are the defaults (fresh.py)."""
        from tpuctl.backends.ssh.fresh import host_side, made_by_tpuctl, remote_dir
        from tpuctl.backends.ssh.placement import RemotePaths
        from tpuctl.inputs.requirements import checked

        if not os.path.isfile(job.script):
            raise TpuctlError(f"script not found: {job.script}")
        self.pair = self.slice.pair_for(job) if self.slice is not None else []  # first: --new-tpu picks its image for the job's framework
        image = self.slice.image if self.slice is not None else None  # a TPU VM's: its TensorFlow is the image's
        self.requirements = checked(job.requirements, job.setup, job.framework, tpu_vm=self.slice is not None, image=image, allowed=job.replace_tensorflow)
        extra = job.processes - job.workers
        workers = job.workers
        if "workers" not in given:
            workers = self.slots - extra
            if workers < 1:
                raise TpuctlError(
                    f"{self.source} gives {self.slots} slot(s): too few for a chief, {job.ps} ps and a worker",
                    hint="add hosts, or host:SLOTS",
                )
        elif job.processes > self.slots:
            raise TpuctlError(
                f"{job.processes} process(es) need {job.processes} slots, but {self.source} gives {self.slots}",
                hint="add hosts, use host:SLOTS, or lower --workers",
            )
        fresh = made_by_tpuctl(self.options.new_tpu, self.slice.node if isinstance(self.slice, TpuSlice) else None)
        self.paths = RemotePaths.resolve(job.script, remote_dir(self.options.remote_dir, fresh))
        named = "--python" if "python" in given else "the [launch] python setting"
        side = host_side(job.python, named, self.options.sync, self.options.remote_dir, self.paths, fresh)
        self.sync, self.chosen, self.warnings = side.sync, list(side.chosen), list(side.warnings)
        if self.options.new_tpu is not None:  # ssh itself, before the VM bills: a missing client or an option it rejects
            self.ssh.check(self.entries[0].host)
        self._choose_files(job, given)
        model_dir = job.model_dir
        if model_dir and "://" not in model_dir:
            model_dir = self.paths.remote_path(os.path.abspath(model_dir))
        return replace(job, workers=workers, script=self.paths.script, model_dir=model_dir, python=side.python or sys.executable)

    def _choose_files(self, job: Job, given: frozenset[str]) -> None:
        """--sync: the files it sends, refused here (so a dry run and --detach refuse too, nothing sent) when the
        script itself is not among them, or when they are over the limit without --sync-large."""
        from tpuctl.backends.ssh.selection import LIMIT_HINT, select

        assert self.paths is not None
        if not self.sync:
            if {"sync_limit", "sync_large"} & given:
                raise TpuctlError("--sync-limit and --sync-large are for --sync")
            return
        self.sync_limit = _sync_limit(self.options.sync_limit, "sync_limit" in given)
        self.selection = select(self.paths.sync_source)
        script = os.path.basename(job.script)
        # A sync the user did not ask for (a new VM's default) can be turned off for a folder that is there already.
        unasked = "; or --no-sync --remote-dir DIR where the hosts have the folder" if self.options.sync is None else ""
        if script not in {path for path, _ in self.selection.files}:
            raise TpuctlError(
                f"--sync would not send {script}: .gitignore or .tpuctlignore excludes it, so the hosts would not have it",
                hint=f"remove it from what excludes it (`git check-ignore -v {shlex.quote(script)}` names the line){unasked}",
            )
        over = self.selection.over(self.sync_limit)
        if over is not None and not self.options.sync_large:
            raise TpuctlError(f"{over}; nothing was sent", hint=LIMIT_HINT + unasked)

    def request(self, job: Job, run_id: str) -> ShippedPlan:
        """The plan as it will run, with `<port>` where each host's free port will be, and the runtime it ships."""
        from tpuctl.backends.ssh.placement import place
        from tpuctl.launch.process.plan import build_plan
        from tpuctl.ssh.shipment import shipment

        self.ssh.check(self.entries[0].host)
        hosts = place(self.entries, job.processes)
        addresses = [format_address(host, 0).rsplit(":", 1)[0] + ":<port>" for host in hosts]
        assert self.paths is not None, "prepare() first"
        # Each host's session and the sync built by the functions a launch runs them with (stand-ins for the
        # agent's source and its hello), so the dry run cannot drift from the run.
        from tpuctl.backends.ssh.session import agent_command
        from tpuctl.backends.ssh.sync import planned

        ssh = {entry.host: shlex.join(agent_command(self.ssh, entry.host, job.python, "<hello>", source="<agent>")) for entry in self.entries}
        sync = None
        if self.selection is not None:
            sync = planned(self.ssh, self.paths, self.selection, len(set(hosts)), self.sync_limit, self.options.sync_large)
        remote = {"workdir": self.paths.where, "python": job.python, "sync": sync, "ssh": ssh, "chosen": self.chosen, "warnings": self.warnings}
        remote |= {"tensorflow": self.pair, "environment": None if (spec := self._env_spec(job)) is None else spec.describe()}
        if (made := self._new_tpu()) is not None:  # its hosts are placeholders until the VM is READY
            remote["new_tpu"] = made.describe(run_id)
        return ShippedPlan(build_plan(job, addresses, run_id=run_id, attempt=1, hosts=hosts, jax_finds_hosts=self.slice is not None), shipment(), remote)

    def _env_spec(self, job: Job) -> EnvSpec | None:
        """--requirements' and --setup's environment, or None; on a TPU VM a lock that replaces its TensorFlow is refused."""
        from tpuctl.backends.ssh.environment.spec import EnvSpec

        return EnvSpec.of_job(job, self.requirements, tpu=self.slice is not None)

    def _new_tpu(self) -> NewTpu | None:
        """--new-tpu's VM, where the launch makes one (its module loads only then)."""
        if self.options.new_tpu is None:
            return None
        from tpuctl.launch.provisioning import NewTpu

        return self.slice if isinstance(self.slice, NewTpu) else None

    def run(self, job: Job, context: RunContext) -> Outcome:
        """The workers on the hosts: the launch's provisioning step hands --new-tpu's (context.hosts), the others are known."""
        from tpuctl.backends.ssh.environment.hosts import for_run
        from tpuctl.backends.ssh.starter import SshStarter
        from tpuctl.launch.preflight import remote_doctor, remote_hello
        from tpuctl.launch.process.supervised import run_supervised

        assert self.paths is not None, "prepare() first"
        if context.hosts is not None:
            self.entries = list(context.hosts)
        made = self._new_tpu()
        tpu_name = made.name if made is not None else self.options.tpu_name
        if self.options.cleanup:
            self._free_tpus(context)
        for line in self.pair if made is None else ():  # --new-tpu's provisioning said them before the create
            context.notice(line)
        for warning in self.warnings:
            context.notice(f"warning: {warning}")
        if self.selection is not None:
            from tpuctl.backends.ssh.placement import place

            context.notice(self.selection.summary(len(set(place(self.entries, job.processes)))))
            if (left_out := self.selection.left_out_line()) is not None:
                context.notice(left_out)
        where = f"{len(self.entries)} host(s) over ssh, in {self.paths.where}"
        context.notice(f"launching {job.workers} worker(s) of {job.script} on {where}; logs: {context.log_dir}")
        starter = SshStarter(
            self.entries,
            self.ssh,
            self.paths,
            python=job.python,
            sync=self.selection,
            notice=context.notice,
            hosts_again=self.slice.hosts_again if self.slice is not None else None,
            node_down=self.slice.down if self.slice is not None else None,
            preflight=remote_hello(job),
            doctor=lambda hosts: remote_doctor(hosts, job.python, tpu_name, job.framework),
            profiler=job.profiler_server,
            environments=None if (spec := self._env_spec(job)) is None else for_run(spec, self.ssh, job, context, self.paths.workdir),
            jax_finds_hosts=self.slice is not None,
        )
        return run_supervised(starter, job, context)

    def _free_tpus(self, context: RunContext) -> None:
        """--cleanup: what a crashed run left holding the TPU goes, on every host, before any worker starts."""
        from tpuctl.ssh.fanout import run_everywhere
        from tpuctl.ssh.tpu_cleanup import CLEANUP_TIMEOUT_S, cleanup_argv

        results = run_everywhere([entry.host for entry in self.entries], cleanup_argv(), self.ssh, timeout=CLEANUP_TIMEOUT_S)
        for result in results:
            for line in result.output.splitlines():
                context.notice(f"cleanup on {result.host}: {line}")
        failed = [result for result in results if not result.ok]
        if failed:
            first = failed[0]
            raise TpuctlError(f"--cleanup failed on {first.host}: {first.error or exit_words(first.exit_code)}", exit_code=FAILED)


@dataclass(frozen=True)
class ShippedPlan:
    """An ssh launch's dry run: the plan, and the copy of tpuctl's runtime each host gets if it lacks it."""

    plan: Plan
    runtime: Shipment
    remote: dict[str, Any]  # the hosts' side: workdir, python, sync, each host's ssh command, warnings

    def to_json(self) -> dict[str, object]:
        from tpuctl.backends.ssh.starter import RUNTIME_HOME

        files = [name for name, _ in self.runtime.files]
        shipped = {"digest": self.runtime.digest, "folder": RUNTIME_HOME + self.runtime.digest, "files": files, "bytes": self.runtime.size}
        return {**self.plan.to_json(), "runtime": shipped, "remote": self.remote}

    def render(self) -> str:
        from tpuctl.backends.ssh.starter import RUNTIME_HOME

        *lines, last = self.plan.render().splitlines()
        python = self.remote["python"] if self.remote.get("environment") is None else f"{self.remote['python']}'s environment (below)"
        lines.append(f"remote: workers run in {self.remote['workdir']} with {python}")
        sync = self.remote["sync"]
        if sync is None:
            lines.append("sync: none: the hosts must already have the script there (--sync copies it)")
        else:
            from tpuctl.backends.ssh.sync import planned_lines

            lines += planned_lines(sync)
        if self.remote.get("environment") is not None:
            from tpuctl.backends.ssh.environment.spec import render

            lines += render(self.remote["environment"])
        lines += [f"ssh to {host}: {command}" for host, command in self.remote["ssh"].items()]
        lines += [f"default: {default}" for default in self.remote["chosen"]]
        lines += [f"warning: {warning}" for warning in self.remote["warnings"]]
        if (made := self.remote.get("new_tpu")) is not None:
            lines.append(
                f"new TPU VM {made['name']}: {','.join(made['types'])} as {','.join(made['capacity'])} hunted in {made['zones']} "
                f"(prices shown before it is created), {made['at_end']} when the run ends; new-tpu-host-N are its hosts"
            )
        lines += self.remote["tensorflow"]
        lines.append(
            f"runtime: tpuctl {__version__}'s runtime ({len(self.runtime.files)} files, {self.runtime.size // 1024} KiB) from "
            f"{RUNTIME_HOME}{self.runtime.digest[:12]}… on each host (shipped where missing), first on the workers' PYTHONPATH"
        )
        return "\n".join([*lines, last])


def _sync_limit(flag: str | None, given: bool) -> int:
    """The per-host limit: --sync-limit, else TPUCTL_SYNC_LIMIT, else a [launch] sync-limit (click's default_map,
    already checked), else 1 GiB."""
    from tpuctl.backends.ssh.selection import DEFAULT_LIMIT
    from tpuctl.inputs.parse import parse_size

    if given and flag is not None:
        return parse_size(flag, "--sync-limit")
    if os.environ.get(SYNC_LIMIT_ENV):
        return parse_size(os.environ[SYNC_LIMIT_ENV], SYNC_LIMIT_ENV)
    return DEFAULT_LIMIT if flag is None else parse_size(flag, "[launch] sync-limit")


def runner(options: Options) -> SshRunner:
    return SshRunner(options)
