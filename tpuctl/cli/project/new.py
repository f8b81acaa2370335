"""`tpuctl new`: list the script templates, or write one into a new folder."""

from __future__ import annotations

import json
import shlex

import click

from tpuctl import scaffold
from tpuctl.cli.display import print_table
from tpuctl.inputs.errors import TpuctlError


@click.command("new")
@click.argument("name", required=False)
@click.argument("directory", metavar="DIR", required=False)
@click.option("--list", "list_only", is_flag=True, help="List the templates with a line each.")
@click.option("--json", "as_json", is_flag=True, help="--list: a list of {name, description}; else {template, dir, files, run}.")
def new(name: str | None, directory: str | None, list_only: bool, as_json: bool) -> None:
    """Start from a training script that already does what N workers and TPUs need.

    `tpuctl new --list` names the templates; `tpuctl new NAME DIR` writes template NAME
    into DIR (a new or empty folder; anything else is refused and left as it was), with
    a README that says how to run it. Each template trains on data it generates (the
    TensorFlow ones read real TFRecord files with a flag), keeps checkpoints in the model
    dir, and resumes after a restart; keras-jax is Keras 3 on JAX (docs/jax.md).

    \b
    tpuctl new --list
    tpuctl new keras-fit my-model && cd my-model && cat README.md
    """
    if list_only:
        if name is not None:
            raise TpuctlError("--list takes no NAME or DIR", hint="`tpuctl new --list`, or `tpuctl new NAME DIR` to write one")
        _show(as_json)
        return
    if name is None or directory is None:
        names = ", ".join(t.name for t in scaffold.available())
        raise TpuctlError("tpuctl new needs NAME and DIR", hint=f"NAME one of: {names}; `tpuctl new --list` describes them")
    files = scaffold.write(name, directory)
    run = scaffold.find(name).run
    if as_json:
        click.echo(json.dumps({"template": name, "dir": directory, "files": [str(f) for f in files], "run": run}))
        return
    click.echo(f"wrote {name} into {directory}: {', '.join(map(str, files))}")
    click.echo(f"run it: cd {shlex.quote(directory)} && {run}   (README.md says more)")


def _show(as_json: bool) -> None:
    templates = scaffold.available()
    if as_json:
        click.echo(json.dumps([{"name": t.name, "description": t.description} for t in templates], indent=2))
        return
    print_table(["NAME", "DESCRIPTION"], [[t.name, t.description] for t in templates])
