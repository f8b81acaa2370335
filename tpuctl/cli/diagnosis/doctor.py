"""`tpuctl doctor`: can this machine, or every worker host, run TensorFlow (or JAX) on its accelerator? (docs/doctor.md)

The probe runs in the interpreter a launch would use (--python, else the [launch] config's, else this
one), here or on every host of --hosts/--hostfile/--tpu over the launch's ssh path; the checks judge its
facts (tpuctl/doctor/checks.py). One line per check; exit 1 when any fails.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import replace
from typing import Any

import click

from tpuctl.backends.ssh.runner import Options
from tpuctl.cli.cloud_options import api_timeout_option
from tpuctl.doctor.across import Row, grouped
from tpuctl.doctor.checks import run_checks
from tpuctl.doctor.local import DEFAULT_IMPORT_DEADLINE_S, Request
from tpuctl.doctor.verdict import Check, Context
from tpuctl.inputs.errors import FAILED, TpuctlError, one_line
from tpuctl.inputs.seconds import Seconds
from tpuctl.inputs.terminal import printable
from tpuctl.launch.option_fields import click_options

MARKS = {"ok": "ok  ", "warn": "warn", "fail": "FAIL"}
COLOURS = {"ok": "green", "warn": "yellow", "fail": "red"}


@click.command("doctor")
@click.argument("script", required=False, metavar="[SCRIPT]")
@click.option("--python", metavar="PATH", help="The workers' interpreter.  [default: launch's: the [launch] config's python, else this one]")
@click.option("--model-dir", metavar="DIR", help="The model dir the launch will use (a gs:// one gets its credentials checked).  [default: from config]")
@click.option(
    "--workers", type=click.IntRange(1, 4096), help="Workers per host: the free ports to find, and whether they share GPUs.  [default: 2]"
)
@click.option(
    "--import-timeout",
    type=Seconds(minimum=1.0),
    default=DEFAULT_IMPORT_DEADLINE_S,
    show_default=True,
    metavar="SECONDS",
    help="How long `import tensorflow` may take before it counts as a hang.",
)
@click.option("--no-import", is_flag=True, help="Do not import TensorFlow (the checks that need it say so).")
@click.option(
    "--framework",
    type=click.Choice(["auto", "tensorflow", "jax"]),
    default="auto",
    show_default=True,
    help="What the workers run: jax checks jax, jaxlib, libtpu and Keras 3 instead of TensorFlow (auto: SCRIPT's, else tensorflow).",
)
@click.option("--dry-run", is_flag=True, help="Print where the probe would run (each host's ssh command); run nothing.")
@click.option("--json", "as_json", is_flag=True, help='JSON: {"checks": [{"name", "status", "found", "fix", "hosts"}]}.')
@click_options(Options)
@api_timeout_option  # --tpu NAME: the TPU API's answer
def doctor(
    script: str | None,
    python: str | None,
    model_dir: str | None,
    workers: int | None,
    import_timeout: float,
    no_import: bool,
    framework: str,
    dry_run: bool,
    as_json: bool,
    **ssh: Any,
) -> None:
    """Check that the workers' Python, TensorFlow, Keras, libtpu and the machine's TPU or GPUs fit together.

    With --framework jax (or a SCRIPT on Keras 3's JAX backend) the interpreter's checks are JAX's:
    jax, jaxlib and libtpu as jax requires them, Keras 3, no TensorFlow taking the TPU beside it.

    Each check prints one line: ok, warn or FAIL, what it found and, for warn and FAIL, the fix. With
    --hosts, --hostfile or --tpu NAME the same checks run on every worker host at once over ssh, and
    the hosts are compared (same Python, TensorFlow, Keras, libtpu; SCRIPT's folder present). Exits 1
    when a check fails.
    """
    options = Options(**{k: v for k, v in ssh.items() if k in Options.__dataclass_fields__})
    launch = _launch_defaults()
    interpreter = python or launch.get("python") or None
    framework, counted = _framework(framework, script), workers is not None
    context = Context(model_dir or launch.get("model_dir") or _setting("model-dir"), workers or 2, counted, framework=framework, script=script)
    # A JAX run's interpreter is never made to import TensorFlow: on a TPU, that import would take the chips.
    request = Request(workers=context.workers, deadline=import_timeout, import_tensorflow=not no_import and framework != "jax")
    remote = options.ssh_hosts is not None or options.ssh_hostfile is not None or options.tpu_name is not None
    if remote:
        from tpuctl.backends.ssh.doctor import plan_hosts, probe_hosts

        if dry_run:
            for line in plan_hosts(options, interpreter or sys.executable, request, script):
                click.echo(printable(line))
            return
        found = probe_hosts(options, interpreter or sys.executable, request, script)
        context = replace(context, runtime_version=found.runtime_version)
        rows = grouped(found.answers, context, found.script_dir)
    else:
        remote_only = ("ssh_user", "ssh_key", "ssh_option", "ssh_config", "remote_dir", "internal_ip", "project", "tpu_zone")
        given = [f"--{name.replace('_', '-').replace('tpu-zone', 'zone')}" for name in remote_only if getattr(options, name) not in (None, False, ())]
        if given:
            raise TpuctlError(f"{', '.join(given)}: for --hosts, --hostfile or --tpu NAME", hint="this machine is checked without ssh")
        if dry_run:
            click.echo(printable(f"here: {interpreter or sys.executable} -c <the probe> {request.argument()}"))
            return
        rows = _here(interpreter or sys.executable, request, context)
        if script is not None:
            rows.append(Row(_script_here(script)))
    _show(rows, remote, as_json)
    failed = list(dict.fromkeys(row.check.name for row in rows if row.check.status == "fail"))
    if failed:
        raise TpuctlError(f"{len(failed)} check(s) failed: {', '.join(failed)}", hint="each FAIL line above says its fix", exit_code=FAILED)


# The launch's host options, less what only a launch does to the hosts (copy the script, clean up the TPU).
doctor.params = [param for param in doctor.params if param.name not in ("sync", "cleanup")]


def _framework(asked: str, script: str | None) -> str:
    """tensorflow or jax: as asked, else what SCRIPT's source says (tpuctl/launch/framework.py, as the launch reads it);
    only a regular file is read (a FIFO would block the read)."""
    if asked != "auto" or script is None or not os.path.isfile(script):
        return "tensorflow" if asked == "auto" else asked
    from tpuctl.launch.framework import choose

    return choose(asked, script, ())[0]


def _here(python: str, request: Request, context: Context) -> list[Row]:
    from tpuctl.cli.display import StatusLine
    from tpuctl.doctor.local import probe_here

    with StatusLine(f"checking {printable(python)}" + ("" if not request.import_tensorflow else " (importing TensorFlow)")):
        facts = probe_here(python, request)
    return [Row(check) for check in run_checks(facts, context)]


def _script_here(script: str) -> Check:
    shown = one_line(script, 160)
    if os.path.isfile(script):
        return Check("script", "ok", f"{shown} found")
    return Check("script", "fail", f"{shown}: no such file", "give the training script's path (relative to this directory)")


def _launch_defaults() -> dict[str, Any]:
    from tpuctl.launch.launch_options import CONFIG_KEYS
    from tpuctl.settings import files as config

    wanted = {k: v for k, v in CONFIG_KEYS.items() if k in ("python", "model_dir")}
    return config.section_defaults("launch", wanted)


def _setting(key: str) -> str | None:
    from tpuctl.settings import cloud as settings
    return settings.resolve().get(key)


def _show(rows: list[Row], remote: bool, as_json: bool) -> None:
    if as_json:
        checks = []
        for row in rows:
            entry: dict[str, Any] = {"name": row.check.name, "status": row.check.status, "found": row.check.found, "fix": row.check.fix or None}
            if remote:
                entry["hosts"] = list(row.hosts)
            checks.append(entry)
        click.echo(json.dumps({"checks": checks}, indent=2))
        return
    width = max(len(row.check.name) for row in rows)
    for row in rows:
        check = row.check
        mark = click.style(MARKS[check.status], fg=COLOURS[check.status], bold=check.status != "ok")
        # What a check found quotes the hosts' facts (versions, paths, names, messages, env values): made safe to show.
        line = f"{check.name.ljust(width)}  {check.found}"
        if check.fix:
            line += f" -> fix: {check.fix}"
        if remote:
            line += f"  [{_hosts(row.hosts)}]"
        click.echo(f"{mark}  {printable(line)}")


def _hosts(hosts: tuple[str, ...]) -> str:
    return ", ".join(hosts) if len(hosts) <= 4 else f"{', '.join(hosts[:3])} and {len(hosts) - 3} more"
