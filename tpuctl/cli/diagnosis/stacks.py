"""`tpuctl stacks [RUN_ID]`: where every worker of a running launch is, right now (docs/hangs.md)."""

from __future__ import annotations

import click

from tpuctl import endings
from tpuctl.inputs.seconds import Seconds
from tpuctl.inputs.terminal import printable


@click.command("stacks")
@click.argument("run_id", required=False)
@click.option(
    "--wait", "wait_s", type=Seconds(), metavar="S", default=30.0, show_default=True,
    help="Seconds to wait for the launch to answer (0 < S <= 604800).",
)
@click.option("--list", "list_runs", is_flag=True, help="List your running launches instead, newest first.")
def stacks(run_id: str | None, wait_s: float, list_runs: bool) -> None:
    """Print every worker's Python stacks in a running launch of yours (default: the newest), local or over ssh.

    The launch keeps running. It prints the same view on its own console, and keeps
    the full dumps in its log folder. Sending SIGQUIT (Ctrl-\\) to `tpuctl launch` does the same.
    """
    from tpuctl.runs import records
    from tpuctl.runs import stacks as stacks_request

    def warn(line: str) -> None:
        click.echo(f"tpuctl: {printable(line)}", err=True)

    if list_runs:
        for record in records.read_all(warn):
            if record.state == endings.RUNNING and record.answers_stacks:
                click.echo(printable(f"{record.run_id}  pid {record.pid}  logs {record.log_dir}"))
        return
    record, chosen = records.find(run_id, warn, running=True)
    if chosen is not None:
        warn(chosen)
    click.echo(printable(stacks_request.request(record, wait_s), lines=True), nl=False)  # a file in the run's folder
