"""gcloud's and kubectl's habits for output, accepted where tpuctl says `--json`.

People arrive with `--format json` (gcloud) and `-o json` / `--output json` (kubectl) in their
fingers; refusing them sends everyone to the help for a spelling. Every command with a `--json`
flag also takes those, with the values `json` and `text` (text: the default, as without `--json`);
`tf-config`, whose `--format` chooses among json, env and dir, takes `-o`/`--output` for it.
`launch` is left alone: every word after SCRIPT that tpuctl does not know is the script's, and
`-o`/`--output` are common script flags.
"""

from __future__ import annotations

import functools
from typing import Any

import click

from tpuctl.inputs.errors import TpuctlError

ALIASES = ("--format", "--output", "-o")
FORMATS = ("json", "text")
_DONE: set[int] = set()


def accept_aliases(command: click.Command) -> None:
    """Give `command` (and its subcommands) the aliases, once."""
    if id(command) in _DONE or command.name == "launch":
        return
    _DONE.add(id(command))
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            accept_aliases(sub)
        return
    taken = {opt for param in command.params for opt in param.opts}
    fmt = next((p for p in command.params if isinstance(p, click.Option) and "--format" in p.opts), None)
    if fmt is not None:  # tf-config: -o/--output name its own --format
        fmt.opts += [alias for alias in ALIASES if alias not in taken]
        return
    if "--json" not in taken or taken & set(ALIASES) or command.callback is None:
        return
    alias = click.Option(["--format", "--output", "-o", "output_format"], type=click.Choice(FORMATS), hidden=True, help="json: as --json.")
    command.params.append(alias)
    command.callback = _with_format(command.callback)


def _with_format(callback: Any) -> Any:
    @functools.wraps(callback)
    def run(*args: Any, output_format: str | None = None, **params: Any) -> Any:
        if output_format == "json":
            params["as_json"] = True
        elif output_format == "text" and params.get("as_json"):  # which one the user meant cannot be guessed
            raise TpuctlError("--json and --format/--output text ask for different outputs", hint="give one of them")
        return callback(*args, **params)

    return run
