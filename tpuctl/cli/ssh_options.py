"""`tpuctl launch` options for workers on other hosts over ssh (--hosts, --hostfile, --ssh-*).

`ssh_launch_options` adds the options to a click command and hands the command
one `remote` argument instead: a RemoteLaunch, or None for a local launch.
Importing this module stays cheap; the ssh machinery loads only when used.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from tpuctl.errors import FAILED, TpuctlError
from tpuctl.hosts import HostEntry, format_address, parse_slot_hosts, read_hostfile

if TYPE_CHECKING:
    from tpuctl.launch.plan import Job, Plan
    from tpuctl.launch.ssh import RemotePaths, SshBackend, SshOptions

DEFAULT_FANOUT = 16  # the same as tpuctl.launch.ssh.DEFAULT_FANOUT, without importing it for --help

# How to reach hosts: `tpuctl launch --hosts/--tpu` and `tpuctl ssh` take the same ones.
_CONNECTION_OPTIONS = (
    click.option("--ssh-user", metavar="USER", help="Remote user.  [default: from your ssh config, else yours]"),
    click.option(
        "--ssh-key", type=click.Path(exists=True, dir_okay=False), help="Identity file (ssh -i).  [default: your agent and ssh config]"
    ),
    click.option(
        "--ssh-option",
        "ssh_option",
        multiple=True,
        metavar="NAME=VALUE",
        help="An ssh option (ssh -o) for every connection, e.g. ProxyJump=bastion (repeatable).",
    ),
    click.option(
        "--ssh-config", type=click.Path(exists=True, dir_okay=False), help="ssh config file to use instead of ~/.ssh/config (ssh -F)."
    ),
    click.option(
        "--fanout",
        type=click.IntRange(min=1),
        default=DEFAULT_FANOUT,
        show_default=True,
        help="Hosts being connected to at the same time.",
    ),
)
_OPTIONS = (
    click.option(
        "--hosts",
        "ssh_hosts",
        metavar="H1,H2[:SLOTS]",
        help="Run the workers on these hosts over ssh; HOST:N runs N workers on HOST (default 1). "
        "Workers fill the slots in order.",
    ),
    click.option(
        "--hostfile",
        "ssh_hostfile",
        type=click.Path(dir_okay=False),
        help="Hosts for ssh, one 'HOST [slots=N]' per line, # comments (DeepSpeed/horovod format).",
    ),
    *_CONNECTION_OPTIONS,
    click.option("--sync", is_flag=True, help="Copy the script's folder to every host first (rsync; skips unchanged files)."),
    click.option("--tpu", "tpu_name", metavar="NAME", help="Run on every host of this TPU VM slice (hosts from the Cloud TPU API)."),
    click.option("--project", "tpu_project", metavar="ID", help="With --tpu: the project [env TPUCTL_PROJECT]."),
    click.option("--zone", "tpu_zone", metavar="ZONE", help="With --tpu: the zone [env TPUCTL_ZONE]."),
    click.option("--internal-ip", is_flag=True, help="With --tpu: connect to the hosts' internal IPs (from inside the VPC)."),
    click.option("--cleanup", is_flag=True, help="First, on every host: kill stale processes holding the TPU, remove /tmp/libtpu_lockfile."),
    click.option(
        "--remote-dir",
        metavar="DIR",
        help="Working directory on the hosts.  [default: this directory's absolute path]",
    ),
)
_NAMES = (
    "ssh_hosts",
    "ssh_hostfile",
    "ssh_user",
    "ssh_key",
    "ssh_option",
    "ssh_config",
    "fanout",
    "sync",
    "remote_dir",
    "tpu_name",
    "tpu_project",
    "tpu_zone",
    "internal_ip",
    "cleanup",
)


def ssh_launch_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add the ssh options to a click command callback, packed into one `remote` argument."""

    @functools.wraps(command)
    def packed(*args: Any, **kwargs: Any) -> Any:
        values = {name: kwargs.pop(name) for name in _NAMES}
        kwargs["remote"] = RemoteLaunch.from_options(**values)
        return command(*args, **kwargs)

    for option in reversed(_OPTIONS):
        packed = option(packed)
    return packed


def ssh_connection_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add --ssh-user, --ssh-key, --ssh-option, --ssh-config and --fanout to a click command."""
    for option in reversed(_CONNECTION_OPTIONS):
        command = option(command)
    return command


def check_ssh_options(values: tuple[str, ...]) -> None:
    """Each --ssh-option must be what `ssh -o` takes: NAME=VALUE (or NAME VALUE)."""
    for option in values:
        if "=" not in option.strip(" =") and " " not in option.strip():
            raise TpuctlError(f"--ssh-option {option!r} is not NAME=VALUE", hint="e.g. --ssh-option ProxyJump=bastion")


def _slice_entries(name: str, project: str | None, zone: str | None, internal_ip: bool) -> list[HostEntry]:
    """Every host of the slice, one worker each: TPUStrategy runs the same program on all of them."""
    from tpuctl.cli.node_info import find_node
    from tpuctl.cloud.slice_hosts import slice_hosts

    node, _ = find_node(name, "`tpuctl list` shows the nodes", project, zone, None, None)
    return [HostEntry(host.address(internal_ip)) for host in slice_hosts(node, name)]


@dataclass
class RemoteLaunch:
    """Everything an ssh launch needs beyond the Job."""

    entries: list[HostEntry]
    source: str
    user: str | None
    key: str | None
    options: tuple[str, ...]
    config: str | None
    fanout: int
    sync: bool
    remote_dir: str | None
    cleanup: bool = False
    paths: RemotePaths | None = None

    @classmethod
    def from_options(
        cls,
        *,
        ssh_hosts: str | None,
        ssh_hostfile: str | None,
        ssh_user: str | None,
        ssh_key: str | None,
        ssh_option: tuple[str, ...],
        ssh_config: str | None,
        fanout: int,
        sync: bool,
        remote_dir: str | None,
        tpu_name: str | None,
        tpu_project: str | None,
        tpu_zone: str | None,
        internal_ip: bool,
        cleanup: bool,
    ) -> RemoteLaunch | None:
        if sum(value is not None for value in (ssh_hosts, ssh_hostfile, tpu_name)) > 1:
            raise TpuctlError("give one of --hosts, --hostfile, --tpu")
        if tpu_name is None and (tpu_project or tpu_zone or internal_ip):
            raise TpuctlError("--project, --zone and --internal-ip are for --tpu NAME")
        if ssh_hosts is None and ssh_hostfile is None and tpu_name is None:
            given = [
                flag
                for flag, value in (
                    ("--ssh-user", ssh_user),
                    ("--ssh-key", ssh_key),
                    ("--ssh-option", ssh_option),
                    ("--ssh-config", ssh_config),
                    ("--sync", sync),
                    ("--remote-dir", remote_dir),
                    ("--fanout", fanout != DEFAULT_FANOUT),
                    ("--cleanup", cleanup),
                )
                if value
            ]
            if given:
                raise TpuctlError(f"{given[0]} is for launches over ssh: add --hosts, --hostfile or --tpu")
            return None
        if tpu_name is not None:
            entries, source = _slice_entries(tpu_name, tpu_project, tpu_zone, internal_ip), f"TPU VM {tpu_name}"
        elif ssh_hosts is not None:
            entries, source = parse_slot_hosts(ssh_hosts, source="--hosts"), "--hosts"
        else:
            assert ssh_hostfile is not None
            entries, source = read_hostfile(ssh_hostfile, ports=False), ssh_hostfile
        check_ssh_options(ssh_option)
        if remote_dir is not None and not remote_dir.strip():
            raise TpuctlError("--remote-dir is empty")
        return cls(
            entries=entries,
            source=source,
            user=ssh_user,
            key=os.path.abspath(ssh_key) if ssh_key else None,
            options=tuple(ssh_option),
            config=os.path.abspath(ssh_config) if ssh_config else None,
            fanout=fanout,
            sync=sync,
            remote_dir=remote_dir,
            cleanup=cleanup,
        )

    @property
    def slots(self) -> int:
        return sum(entry.slots for entry in self.entries)

    def ssh_options(self) -> SshOptions:
        from tpuctl.launch.ssh import SshOptions

        return SshOptions(
            user=self.user, key=self.key, options=self.options, config=self.config, fanout=self.fanout
        )

    def resolve(self, script: str, workers: int, strategy: str, ps: int, model_dir: str | None) -> tuple[int, str, str | None]:
        """The worker count, the script path and the model dir as the hosts see them.

        Without an explicit --workers the hosts' slots decide how many workers run.
        """
        from tpuctl.launch.ssh import RemotePaths

        explicit = click.get_current_context().get_parameter_source("workers") in (
            click.core.ParameterSource.COMMANDLINE,
            click.core.ParameterSource.ENVIRONMENT,
        )
        extra = 1 + ps if strategy == "parameter-server" else 0
        if not explicit:
            workers = self.slots - extra
            if workers < 1:
                raise TpuctlError(
                    f"{self.source} gives {self.slots} slot(s): too few for a chief, {ps} ps and a worker",
                    hint="add hosts, or host:SLOTS",
                )
        elif workers + extra > self.slots:
            raise TpuctlError(
                f"{workers + extra} process(es) need {workers + extra} slots, but {self.source} gives {self.slots}",
                hint="add hosts, use host:SLOTS, or lower --workers",
            )
        self.paths = RemotePaths.resolve(script, self.remote_dir)
        if model_dir and "://" not in model_dir:
            model_dir = self.paths.remote_path(model_dir)
        return workers, self.paths.script, model_dir

    def free_tpus(self) -> None:
        """--cleanup: what a crashed run left holding the TPU goes, on every host, before any worker starts."""
        from tpuctl.launch.ssh import run_everywhere
        from tpuctl.launch.tpu_cleanup import cleanup_argv

        results = run_everywhere([entry.host for entry in self.entries], cleanup_argv(), self.ssh_options())
        for result in results:
            for line in result.output.splitlines():
                click.echo(f"tpuctl: cleanup on {result.host}: {line}", err=True)
        failed = [result for result in results if not result.ok]
        if failed:
            first = failed[0]
            raise TpuctlError(
                f"--cleanup failed on {first.host}: {first.error or f'exit status {first.exit_code}'}", exit_code=FAILED
            )

    def dry_run_plan(self, job: Job, run_id: str) -> Plan:
        """The plan as it will run, with `<port>` where each host's free port will be."""
        from tpuctl.launch.plan import build_plan
        from tpuctl.launch.ssh import place

        self.ssh_options().check(self.entries[0].host)
        hosts = place(self.entries, job.processes)
        addresses = [format_address(host, 0).rsplit(":", 1)[0] + ":<port>" for host in hosts]
        return build_plan(job, addresses, run_id=run_id, attempt=1, hosts=hosts)

    def describe(self) -> str:
        assert self.paths is not None
        hosts = len(self.entries)
        return f"{hosts} host(s) over ssh, in {self.paths.workdir}"

    def backend(self, job: Job, notice: Callable[[str], None]) -> SshBackend:
        from tpuctl.launch.ssh import SshBackend

        assert self.paths is not None, "resolve() first"
        return SshBackend(self.entries, self.ssh_options(), self.paths, python=job.python, sync=self.sync, notice=notice)


def ssh_backend(ctx: click.Context, backend: str, remote: RemoteLaunch | None) -> str:
    """--hosts/--hostfile mean --backend ssh; --backend ssh without hosts is incomplete."""
    if remote is None:
        if backend == "ssh":
            raise TpuctlError("--backend ssh needs --hosts or --hostfile")
        return backend
    explicit = ctx.get_parameter_source("backend") not in (None, click.core.ParameterSource.DEFAULT)
    if backend != "ssh" and explicit:
        raise TpuctlError(f"{remote.source} runs workers over ssh, not with --backend {backend}")
    return "ssh"
