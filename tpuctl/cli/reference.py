"""`python -m tpuctl.cli.reference`: docs/cli-reference.md, generated from the real --help texts.

A test regenerates it and compares, so the reference can never drift from the CLI.
"""

from __future__ import annotations

import click

from tpuctl.cli import cli

WIDTH = 100


def _help(command: click.Command, name: str, parent: click.Context | None) -> str:
    """Help as a real invocation renders it: child contexts inherit the group's settings (-h)."""
    settings = {"terminal_width": WIDTH, "max_content_width": WIDTH, **command.context_settings}
    with click.Context(command, info_name=name, parent=parent, **settings) as ctx:
        return command.get_help(ctx)


def render() -> str:
    root = click.Context(cli, info_name="tpuctl", terminal_width=WIDTH, max_content_width=WIDTH, **cli.context_settings)
    parts = [
        "# CLI reference",
        "",
        "Generated from `--help` by `make docs` (`python -m tpuctl.cli.reference`); a test keeps it in sync.",
        "",
        "## tpuctl",
        "",
        "```text",
        cli.get_help(root),
        "```",
    ]
    for name in cli.list_commands(root):
        command = cli.get_command(root, name)
        assert command is not None
        parts += ["", f"## tpuctl {name}", "", "```text", _help(command, name, root), "```"]
    return "\n".join(parts) + "\n"


if __name__ == "__main__":
    print(render(), end="")
