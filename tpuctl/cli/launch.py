"""`tpuctl launch`: parse, hand every value to the launch core, print the request or the outcome."""

from __future__ import annotations

import difflib
import json
import os
import sys
from collections.abc import Callable
from functools import partial

import click
from click.core import ParameterSource

from tpuctl.cli import output_flags
from tpuctl.cli.cloud_options import api_timeout_option
from tpuctl.endings import RUNNING
from tpuctl.inputs.terminal import printable
from tpuctl.launch import option_fields, script_flags
from tpuctl.launch.execute import execute
from tpuctl.launch.job import Job
from tpuctl.launch.launch_options import CONFIG_KEYS, LaunchOptions
from tpuctl.launch.option_fields import click_options
from tpuctl.launch.outcome import summarise, tasks
from tpuctl.launch.prepare import Launch, prepare
from tpuctl.launch.prepare import request as dry_run_request
from tpuctl.launch.registry import BACKENDS, backend_module

__all__ = ["CONFIG_KEYS", "launch"]  # CONFIG_KEYS: the [launch] keys a config file may set (read by tpuctl.cli)

_EXPLICIT = (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)


# Section titles of `launch --help`, one per backend; a backend missing here gets "--backend NAME".
_SECTIONS = {
    "local": "Local workers (the default)",
    "ssh": "SSH hosts and TPU VM slices (--hosts, --hostfile, --tpu)",
    "kubernetes": "Kubernetes (--backend kubernetes)",
    "vertex": "Vertex AI (--backend vertex)",
}
# What a first launch needs, at the top of "Options" in this order; the rest follow as declared.
_FIRST = ("workers", "strategy", "model_dir", "log_dir")
# The options every backend takes, past the few a first launch needs (those stay under "Options", with any option
# added later): a newcomer reads --workers, --strategy, --model-dir, --dry-run and --backend, not 30 tuning knobs.
_COMMON_SECTIONS = (
    ("How each worker builds its strategy", ("strategy_builder", "scope", "keras", "ps", "communication", "devices")),
    ("Failures, restarts and deadlines", ("max_restarts", "max_preemptions", "hang_timeout", "start_timeout", "tpu_timeout", "api_timeout")),
    ("Rehearsal and watching", ("rehearse", "runtime", "simulate_devices", "verbose", "tail_view")),
)


class _LaunchCommand(click.Command):
    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta["tpuctl.raw_args"] = list(args)  # where each word stood: script_flags reads what came after SCRIPT
        return super().parse_args(ctx, args)

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """One section per backend, so a user reads the options of the backend they use, not 170 lines of all four.
        An option two backends share is listed under the first and named under the second."""
        params = {str(p.name): p for p in self.get_params(ctx) if isinstance(p, click.Option)}  # click 8.5 gives arguments rows too
        shown: set[str] = set()

        def rows(names: list[str]) -> list[tuple[str, str]]:
            found = [record for name in names if name in params and (record := params[name].get_help_record(ctx))]
            shown.update(names)
            return found

        common = [name for name in params if not any(name in option_fields.names(backend_module(b).Options) for b in BACKENDS)]
        common.sort(key=lambda name: _FIRST.index(name) if name in _FIRST else len(_FIRST))
        grouped = {name for _, section in _COMMON_SECTIONS for name in section}
        with formatter.section("Options"):
            formatter.write_dl(rows([name for name in common if name not in grouped]))
        for title, section in _COMMON_SECTIONS:
            with formatter.section(title):
                formatter.write_dl(rows(list(section)))
        for backend in BACKENDS:
            names = option_fields.names(backend_module(backend).Options)
            again = [flag for name in names if name in shown and (flag := params[name].opts[0])]
            found = rows([name for name in names if name not in shown])
            if again:
                found.append(("(also)", ", ".join(again) + ", as above"))
            with formatter.section(_SECTIONS.get(backend, f"--backend {backend}")):
                formatter.write_dl(found)


@click.command(
    cls=_LaunchCommand,
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": True},
    short_help="Run a training script as N workers under a distribution strategy.",
)
@click.argument("script", type=click.Path(dir_okay=False))
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@click_options(Job, LaunchOptions, *(backend_module(name).Options for name in BACKENDS))
@partial(api_timeout_option, each_call=True)  # a run lasts hours: each Google API call (--tpu, --new-tpu, Vertex AI, gs://) its own
@click.pass_context
def launch(ctx: click.Context, /, script: str, script_args: tuple[str, ...], **params: object) -> None:
    """Run SCRIPT as N workers, each with its own TF_CONFIG, under a distribution strategy.

    tpuctl's options may come before or after SCRIPT; other options go to the
    script, and everything after `--` goes to it untouched. A tpuctl option after
    SCRIPT that the script defines too is tpuctl's (it says so); one close to a
    tpuctl option that the script does not define is refused as a typo. The
    launch exits with the status of the first worker that failed, or 130 when
    interrupted.
    """
    names = [opt for param in ctx.command.params for opt in (*param.opts, *param.secondary_opts) if opt.startswith("--")]
    if script.startswith("-") and not os.path.exists(script):
        # Unknown options reach the script (they may be its own), so a mistyped one of
        # ours before SCRIPT would otherwise be reported as a missing script.
        typed = script.split("=", 1)[0]
        if typed in output_flags.ALIASES:  # gcloud's --format json, kubectl's -o json; after SCRIPT they are the script's
            raise click.NoSuchOption(typed, f"No such option {typed!r}. Did you mean '--json'?", ctx=ctx)
        raise click.NoSuchOption(typed, possibilities=difflib.get_close_matches(typed, names, n=2, cutoff=0.75), ctx=ctx)
    reading = script_flags.read(ctx.meta.get("tpuctl.raw_args", []), script, names)
    if reading.note:
        click.echo(f"tpuctl: {printable(reading.note)}", err=True)
    given = frozenset(name for name in params if ctx.get_parameter_source(name) in _EXPLICIT)
    prepared = prepare(script, script_args, params, given)
    if prepared.options.dry_run:
        request = dry_run_request(prepared)
        click.echo(json.dumps(request.to_json(), indent=2) if prepared.options.as_json else printable(request.render(), lines=True))
        return
    if prepared.options.detach:
        _detach(prepared)
        return
    sys.exit(_run(prepared))


def _run(prepared: Launch, started: Callable[[], None] | None = None) -> int:
    as_json = prepared.options.as_json
    say = lambda line: click.echo(f"tpuctl: {printable(line, lines=True)}", err=True)  # noqa: E731  # may quote a host's, an API's words
    outcome = execute(prepared, sys.stderr if as_json else sys.stdout, say, detached=started is not None, started=started)
    if as_json:
        click.echo(json.dumps(outcome.to_json(backend=prepared.runner.name, run_id=prepared.run_id, log_dir=prepared.log_dir)))
    else:
        job = prepared.job
        show = lambda line: click.echo(printable(line), err=True)  # noqa: E731  # a worker's last lines, quoted
        summarise(outcome, tasks(job.workers, job.ps if job.parameter_server else None), prepared.log_dir, say, show)
    return outcome.exit_code


def _detach(prepared: Launch) -> None:
    """The run goes on in a process of its own, whose console is the run's console file; say where, and how to reach it."""
    from tpuctl.runs import detach
    from tpuctl.runs.folder import RunFolder

    folder = RunFolder(prepared.log_dir.absolute())
    pid = detach.start(lambda ready: _run(prepared, started=lambda: ready(folder.console_log)))
    run = prepared.run_id
    if prepared.options.as_json:
        state = {"run_id": run, "backend": prepared.runner.name, "state": RUNNING, "pid": pid, "log_dir": str(folder.path)}
        click.echo(json.dumps({**state, "console": str(folder.console_log)}))
        return
    click.echo(run)
    click.echo(f"tpuctl: {run} runs detached (pid {pid}); its console: {folder.console_log}", err=True)
    click.echo(f"tpuctl: follow it: tpuctl attach {run}; its workers: tpuctl logs {run} -f; stop it: tpuctl stop {run}", err=True)
