"""`python -m tpuctl.cli.reference`: docs/cli-reference.md, generated from the real --help texts.

A test regenerates it and compares, so the reference can never drift from the CLI.
"""

from __future__ import annotations

import click

from tpuctl.cli import cli

WIDTH = 100


def _help(command: click.Command, path: list[str]) -> str:
    with click.Context(command, info_name=" ".join(path), terminal_width=WIDTH, max_content_width=WIDTH) as ctx:
        return command.get_help(ctx)


def render() -> str:
    parts = [
        "# CLI reference",
        "",
        "Generated from `--help` by `make docs` (`python -m tpuctl.cli.reference`); a test keeps it in sync.",
        "",
        "## tpuctl",
        "",
        "```text",
        _help(cli, ["tpuctl"]),
        "```",
    ]
    with click.Context(cli) as ctx:
        for name in cli.list_commands(ctx):
            command = cli.get_command(ctx, name)
            assert command is not None
            parts += ["", f"## tpuctl {name}", "", "```text", _help(command, ["tpuctl", name]), "```"]
    return "\n".join(parts) + "\n"


if __name__ == "__main__":
    print(render(), end="")
