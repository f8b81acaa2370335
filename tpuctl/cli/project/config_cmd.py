"""`tpuctl config show`: every cloud setting, its value, and the layer it came from."""

from __future__ import annotations

import json

import click

from tpuctl.cli.display import print_table
from tpuctl.settings import cloud as settings
from tpuctl.settings import files as config


@click.group("config", invoke_without_command=True, subcommand_metavar="COMMAND [ARGS]...")
@click.pass_context
def config_group(ctx: click.Context) -> None:
    """Inspect tpuctl's settings."""
    if ctx.invoked_subcommand is None:
        # As bare `tpuctl` does: the help as help (stderr, exit 2), not click's squashed "Missing command".
        click.echo(ctx.get_help(), err=True, color=ctx.color)
        ctx.exit(2)


@config_group.command("show")
@click.option("--project", metavar="ID", help="As a command's --project would set it.")
@click.option("--zone", metavar="ZONE", help="As a command's --zone would set it.")
@click.option("--json", "as_json", is_flag=True, help="An object: key -> {value, source}.")
def show(project: str | None, zone: str | None, as_json: bool) -> None:
    """Show each setting and where it came from.

    Precedence: flag > TPUCTL_* variable > ./tpuctl.toml > user config file >
    gcloud's active configuration > default.
    """
    resolved = settings.resolve({"project": project, "zone": zone})
    if as_json:
        data = {s.key: {"value": s.shown(v.value), "source": v.source, "env": s.env} for s, v in resolved.items()}
        click.echo(json.dumps(data, indent=2))
        return
    rows = [[s.key, s.shown(v.value) or "-", v.source] for s, v in resolved.items()]
    print_table(["SETTING", "VALUE", "SOURCE"], rows)
    # Both places are looked in; say which hold a file, so a user does not edit one that is never read.
    files = ", ".join(f"{path}{'' if path.exists() else ' (none there)'}" for path in reversed(config.config_files()))
    click.echo(f"config files (highest first): {files}", err=True)
