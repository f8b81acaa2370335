"""`tpuctl tf-config`: print the TF_CONFIG of every task of a cluster, or check one.

Plain click and json only: this runs in the CLI process, which must start fast
and never import TensorFlow or rich.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import click
from click.core import ParameterSource

from tpuctl.cluster.hosts import MAX_TASKS, HostEntry, parse_hosts, read_hostfile
from tpuctl.cluster.tf_config import DEFAULT_PORT, ClusterSpec, Task, cluster_from_hosts, parse_task, parse_tf_config
from tpuctl.inputs.errors import FAILED, TpuctlError
from tpuctl.inputs.parse import read_small_text, read_stream_text
from tpuctl.inputs.private_files import write_new_file

# What a bare `--check` stands for. argv cannot contain NUL, so no typed value collides.
_FROM_ENV = "\0TF_CONFIG"


def _task_option(ctx: click.Context, param: click.Parameter, value: str | None) -> Task | None:
    if value is None:
        return None
    try:
        return parse_task(value)
    except ValueError as err:
        raise click.BadParameter(str(err), ctx, param) from None


@click.command("tf-config")
@click.option("--workers", type=click.IntRange(1, MAX_TASKS), metavar="N", help="Worker tasks (a --chief comes on top).")
@click.option("--chief", is_flag=True, help="Add a chief task; without one, worker 0 is the chief.")
@click.option("--ps", type=click.IntRange(0, MAX_TASKS), default=0, show_default=True, metavar="K", help="Parameter-server tasks.")
@click.option("--evaluator", is_flag=True, help="Add an evaluator; it runs beside the cluster, not in it.")
@click.option("--hosts", metavar="HOST[:PORT],...", help="One address per task, in the order chief, workers, ps; a host without a port gets --base-port.")
@click.option("--hostfile", metavar="FILE", help="'host[:port] [slots=N]' lines; a host supplies N tasks on consecutive ports.")
@click.option(
    "--base-port",
    type=click.IntRange(1, 65535),
    default=DEFAULT_PORT,
    show_default=True,
    metavar="P",
    help="First port for tasks whose host has no port (localhost:P, P+1, ... without --hosts/--hostfile).",
)
@click.option("--task", "only", metavar="TYPE:INDEX", callback=_task_option, help="Print only this task, e.g. worker:1.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["json", "env", "dir"]),
    default="json",
    show_default=True,
    help="json: one object per line; env: `export TF_CONFIG=...` lines; dir: DIR/TYPE-INDEX.json files.",
)
@click.option(
    "--check",
    metavar="[JSON|@FILE|-]",
    is_flag=False,
    flag_value=_FROM_ENV,
    help="Validate a TF_CONFIG instead: the JSON, @FILE, - for stdin, or $TF_CONFIG when no value is given.",
)
@click.argument("directory", metavar="[DIR]", required=False)
@click.pass_context
def tf_config(
    ctx: click.Context, workers: int | None, chief: bool, ps: int, evaluator: bool, hosts: str | None, hostfile: str | None,
    base_port: int, only: Task | None, fmt: str, check: str | None, directory: str | None,
) -> None:
    """Print the TF_CONFIG of every task of a cluster, or --check one.

    \b
    Examples:
      tpuctl tf-config --workers 2
      tpuctl tf-config --workers 2 --chief --ps 1 --task worker:1 --format env
      tpuctl tf-config --workers 3 --hostfile hosts.txt --format dir tf_config/
      tpuctl tf-config --check               # validates $TF_CONFIG
    """
    if check is not None:
        _reject_with_check(ctx)
        spec, checked = parse_tf_config(_check_text(check))
        click.echo(_summary(spec, checked))
        return
    if workers is None:
        raise TpuctlError("--workers is required", hint="e.g. tpuctl tf-config --workers 2; or --check to validate")
    out_dir = _output_dir(fmt, directory)
    entries, source = _host_list(hosts, hostfile)
    spec = cluster_from_hosts(
        workers, entries, chief=chief, ps=ps, evaluator=evaluator, base_port=base_port, source=source
    )
    tasks = _select(spec, only)
    if out_dir is not None:
        _write_dir(spec, tasks, out_dir)
        return
    for task in tasks:
        config = spec.tf_config_json(task)
        click.echo(config if fmt == "json" else f"# {task.name}\nexport TF_CONFIG={shlex.quote(config)}")


def _reject_with_check(ctx: click.Context) -> None:
    """--check validates what it is given; a cluster option beside it would be silently ignored."""
    for param in ctx.command.params:
        if param.name != "check" and ctx.get_parameter_source(str(param.name)) == ParameterSource.COMMANDLINE:
            raise TpuctlError(f"--check cannot be combined with {param.get_error_hint(ctx)}")


def _check_text(value: str) -> str:
    if value == _FROM_ENV:
        text = os.environ.get("TF_CONFIG")
        if text is None:
            raise TpuctlError("TF_CONFIG is not set", hint="or pass it: --check JSON, --check @FILE, --check -")
        return text
    if value == "-":
        return _stdin_text()
    if value.startswith("@"):
        text = read_small_text(Path(value[1:]), "--check file")
        if text is None:
            raise TpuctlError(f"cannot read {value[1:]}: No such file or directory")
        return text
    return value


def _stdin_text() -> str:
    """stdin, bounded: `--check - < /dev/zero` is refused at the size limit."""
    if sys.stdin is None:
        raise TpuctlError("cannot read stdin: it is closed")
    stream = getattr(sys.stdin, "buffer", sys.stdin)
    return read_stream_text(stream.read, "stdin")


def _summary(spec: ClusterSpec, task: Task) -> str:
    role = "the evaluator, beside the cluster" if task.type == "evaluator" else "the chief" if spec.is_chief(task) else "not the chief"
    workers = f"{spec.num_workers} training worker{'s' * (spec.num_workers != 1)}"
    return f"TF_CONFIG ok: {task.name} ({role}); {workers}; cluster {spec.describe()}"


def _output_dir(fmt: str, directory: str | None) -> Path | None:
    """DIR is a positional argument so that `--format dir DIR` reads as the docs write it."""
    if fmt != "dir":
        if directory is not None:
            raise TpuctlError(f"unexpected argument {directory!r}", hint="a DIR argument goes with --format dir")
        return None
    if directory is None:
        raise TpuctlError("--format dir needs a directory", hint="e.g. --format dir tf_config/")
    return Path(directory)


def _host_list(hosts: str | None, hostfile: str | None) -> tuple[list[HostEntry] | None, str]:
    if hosts is not None and hostfile is not None:
        raise TpuctlError("--hosts and --hostfile cannot be combined")
    if hosts is not None:
        return parse_hosts(hosts, source="--hosts"), "--hosts"
    if hostfile is not None:
        return read_hostfile(hostfile), f"hostfile {hostfile}"
    return None, "localhost"


def _select(spec: ClusterSpec, task: Task | None) -> list[Task]:
    tasks = spec.tasks()
    if task is None:
        return tasks
    if task in tasks:
        return [task]
    if task.type == "evaluator" and not spec.evaluator:
        raise TpuctlError(f"--task {task.name}: this cluster has no evaluator", hint="add --evaluator")
    if task.type == "evaluator":
        raise TpuctlError(f"--task {task.name}: out of range, there is only evaluator:0")
    raise TpuctlError(f"--task {task.name}: not in this cluster, which has {spec.describe()}")


def _write_dir(spec: ClusterSpec, tasks: list[Task], directory: Path) -> None:
    """One file per task, so each machine (or a ConfigMap key) can take its own."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for task in tasks:
            path = directory / f"{task.type}-{task.index}.json"
            write_new_file(path, spec.tf_config_json(task) + "\n")  # never through a symlink planted there
            click.echo(f"wrote {path}")
    except OSError as err:
        raise TpuctlError(
            f"cannot write {err.filename or directory}: {err.strerror or err}", exit_code=FAILED
        ) from None
