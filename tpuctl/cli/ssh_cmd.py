"""`tpuctl ssh NAME [--worker all] -- COMMAND`: one command on the hosts of a TPU VM slice.

As `gcloud compute tpus tpu-vm ssh --worker=all --command=…` does, but with
the user's own OpenSSH (config, agent, ProxyJump), concurrent, each host's
output prefixed by its worker, and `--cleanup` to free a TPU that a crashed
run left held.
"""

from __future__ import annotations

import click

from tpuctl.cli.cloud_options import project_options, zone_option
from tpuctl.launch.option_fields import click_options
from tpuctl.ssh.connection import Connection


@click.command("ssh")
@click.argument("name")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@project_options
@zone_option
@click.option("--worker", default="0", show_default=True, metavar="all|N[,N]", help="Which hosts of the slice.")
@click.option("--internal-ip", is_flag=True, help="Connect to the hosts' internal IPs (from inside the VPC).")
@click.option("--cleanup", is_flag=True, help="First kill stale processes holding the TPU and remove /tmp/libtpu_lockfile.")
@click.option("--dry-run", is_flag=True, help="Print each host's ssh command (the node is looked up); connect to none.")
@click_options(Connection)
def ssh(
    name: str,
    command: tuple[str, ...],
    project: str | None,
    credentials: str | None,
    access_token_file: str | None,
    zone: str | None,
    worker: str,
    internal_ip: bool,
    cleanup: bool,
    dry_run: bool,
    ssh_user: str | None,
    ssh_key: str | None,
    ssh_option: tuple[str, ...],
    ssh_config: str | None,
    fanout: int,
) -> None:
    """Run COMMAND (after `--`) on the chosen workers of TPU VM NAME, all at once.

    Exits 0 when it succeeded everywhere, else with the first failing host's
    status (255 when ssh could not connect).
    """
    from tpuctl.ssh.command import SliceCommand, plan_on_slice, run_on_slice

    connection = Connection(ssh_user=ssh_user, ssh_key=ssh_key, ssh_option=ssh_option, ssh_config=ssh_config, fanout=fanout)
    request = SliceCommand(name, command, connection, worker, internal_ip, cleanup, project, zone, credentials, access_token_file, dry_run)
    if dry_run:
        for line in plan_on_slice(request):
            click.echo(line)
        return
    status = 0
    for stage in run_on_slice(request):
        for worker_result in stage:
            label, result = worker_result.label, worker_result.result
            if result.dropped:
                click.echo(f"tpuctl: {label} printed more than tpuctl keeps: its first {result.dropped} bytes were dropped", err=True)
            for line in result.output.splitlines():
                click.echo(f"{label} {line}")
            if result.error:
                click.echo(f"tpuctl: {label} could not run: {result.error}", err=True)
            status = status or result.exit_code
    if status:
        raise SystemExit(status)
