"""`tpuctl babysit`: keep a (spot) TPU VM alive and a command running on it (tpuctl.cloud.babysit)."""

from __future__ import annotations

import click

from tpuctl.cli.cloud_options import project_options, resolve, tpu_api, zone_option
from tpuctl.cli.display import StatusLine


def _note(message: str) -> None:
    click.echo(f"babysit: {message}", err=True)


@click.command("babysit")
@click.argument("name")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@project_options
@zone_option
@click.option("--interval", type=click.FloatRange(min=0.1), default=30.0, show_default=True, help="Seconds between checks of the node.")
@click.option("--max-recreates", type=click.IntRange(min=0), default=10, show_default=True, help="Give up after this many recreations.")
def babysit(
    name: str,
    command: tuple[str, ...],
    project: str | None,
    credentials: str | None,
    access_token_file: str | None,
    zone: str | None,
    interval: float,
    max_recreates: int,
) -> None:
    """Watch TPU VM NAME; when it is PREEMPTED, TERMINATED or gone, recreate it and rerun COMMAND.

    Put COMMAND after `--`. It runs on this machine, first once the node is
    READY, then again after every recreation. Babysitting ends with the
    command's exit status when it ends on a healthy node, or with 130 on Ctrl-C,
    SIGTERM or SIGHUP. Without a command, it watches until then. However it ends,
    the command and everything it started are stopped.
    """
    from tpuctl.cloud import babysit as sitter
    from tpuctl.cloud import nodespec

    nodespec.check_name(name)
    resolved = resolve(project=project, zone=zone, credentials=credentials, access_token_file=access_token_file)
    spec = nodespec.load_saved(resolved.project, resolved.zone, name, "babysit")
    watch = sitter.Watch(command, interval, max_recreates, note=_note, status=StatusLine)
    raise SystemExit(sitter.babysit(tpu_api(resolved), spec, watch))
