"""`tpuctl babysit`: keep a (spot) TPU VM alive and a command running on it (tpuctl.cloud.babysit).

The loop is kept as a run (tpuctl.runs.recorded): `tpuctl runs` lists it, `tpuctl stop` stops
it; with --detach it goes on in a process of its own (tpuctl.runs.detach), as `launch --detach` does.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from tpuctl.cli.cloud_options import project_options, resolve, tpu_api, zone_option
from tpuctl.cli.display import StatusLine

if TYPE_CHECKING:
    from tpuctl.runs.recorded import Recorded


def _note(message: str) -> None:
    click.echo(f"babysit: {message}", err=True)


@click.command("babysit")
@click.argument("name")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@project_options
@zone_option
@click.option("--interval", type=click.FloatRange(min=0.1), default=30.0, show_default=True, help="Seconds between checks of the node.")
@click.option("--max-recreates", type=click.IntRange(min=0), default=10, show_default=True, help="Give up after this many recreations.")
@click.option("--detach", is_flag=True, help="Babysit in a process of its own that outlives this terminal; print its run id and return.")
def babysit(
    name: str,
    command: tuple[str, ...],
    project: str | None,
    credentials: str | None,
    access_token_file: str | None,
    zone: str | None,
    interval: float,
    max_recreates: int,
    detach: bool,
) -> None:
    """Watch TPU VM NAME; when it is PREEMPTED, TERMINATED or gone, recreate it and rerun COMMAND.

    Put COMMAND after `--`. It runs on this machine, first once the node is
    READY, then again after every recreation. Babysitting ends with the
    command's exit status when it ends on a healthy node, or with 130 on Ctrl-C,
    SIGTERM or SIGHUP. Without a command, it watches until then. However it ends,
    the command and everything it started are stopped.

    Babysitting is a run of its own: `tpuctl runs` lists it, `tpuctl stop RUN`
    stops it. With --detach it survives the terminal: its console goes to the
    run's folder (`tpuctl attach RUN` follows it).
    """
    from tpuctl.cloud import babysit as sitter
    from tpuctl.cloud import nodespec
    from tpuctl.cloud.node_lookup import landed_zone
    from tpuctl.launch.secret_values import shown_args
    from tpuctl.runs.recorded import Recorded

    nodespec.check_name(name)
    resolved = resolve(project=project, zone=zone, credentials=credentials, access_token_file=access_token_file)
    spec = nodespec.load_saved(resolved.project, landed_zone(resolved, name), name, "babysit")
    api = tpu_api(resolved)
    deadline = float(resolved.require("create-deadline"))
    watch = sitter.NodeWatch(command, interval, max_recreates, note=_note, status=StatusLine, create_deadline_s=deadline)
    kept = Recorded.new("babysit", f"babysit-{name}", shlex.join(shown_args(command)), job=name)
    if detach:
        _detach(kept, lambda: sitter.babysit(api, spec, watch))
        return
    raise SystemExit(kept.run(lambda: sitter.babysit(api, spec, watch), _note))


def _detach(kept: Recorded, sit: Callable[[], int]) -> None:
    """The loop goes on in a process of its own, whose console is the run's console file; say where, and how to reach it."""
    from tpuctl.runs import detach

    pid = detach.start(lambda ready: kept.run(sit, _note, started=ready))
    run = kept.run_id
    click.echo(run)
    _note(f"{run} runs detached (pid {pid}); its console: {kept.folder.console_log}")
    _note(f"follow it: tpuctl attach {run}; stop it: tpuctl stop {run}")
