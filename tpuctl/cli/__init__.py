"""The `tpuctl` entry point.

Subcommands are imported only when invoked, so `tpuctl --help` stays as fast as
a bare click program and never pulls in rich, google.cloud or TensorFlow.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import io
import os
import sys
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import click

from tpuctl import __version__
from tpuctl.cli import output_flags
from tpuctl.endings import INTERRUPTED
from tpuctl.inputs import parse as inputs
from tpuctl.inputs import terminal
from tpuctl.inputs.errors import FAILED, USAGE, TpuctlError, one_line

# command name -> (module, attribute, one-line help shown in `tpuctl --help`)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "auth": ("tpuctl.cli.project.auth", "auth", "Check credentials; give the TPU service identity the roles a job needs."),
    "accelerators": ("tpuctl.cli.offers", "accelerators", "The old name of `tpuctl offers`."),
    "attach": ("tpuctl.cli.runs", "attach", "Follow a detached run's console to its end; Ctrl-C detaches, the run goes on."),
    "babysit": ("tpuctl.cli.babysit", "babysit", "Watch a TPU VM; recreate it when preempted and rerun a command."),
    "config": ("tpuctl.cli.project.config_cmd", "config_group", "Show every setting and where its value came from."),
    "connect": ("tpuctl.cli.devices", "connect", "Print the Python that reaches a TPU here, in Colab, at grpc://, or by name."),
    "create": ("tpuctl.cli.node_ops", "create", "Create a TPU VM (spot, queued) and wait until it is READY."),
    "delete": ("tpuctl.cli.node_ops", "delete", "Delete a TPU VM."),
    "describe": ("tpuctl.cli.node_info", "describe", "Show a TPU VM: state, health, hosts and their IPs."),
    "doctor": ("tpuctl.cli.diagnosis.doctor", "doctor", "Check that this machine (or every worker host) can run TensorFlow on its accelerator."),
    "devices": ("tpuctl.cli.devices", "devices", "List the TPU cores, GPUs and CPUs a script will see, here or on a TPU VM."),
    "init": ("tpuctl.cli.project.init", "init", "Choose project, zone, accelerator and runtime once; checked with the API."),
    "launch": ("tpuctl.cli.launch", "launch", "Run a training script as N workers under a distribution strategy."),
    "list": ("tpuctl.cli.node_info", "list_nodes", "List TPU VMs in a zone or in every zone."),
    "logs": ("tpuctl.cli.runs", "logs", "Print a run's worker output, while it runs or after; -f follows it to the end."),
    "new": ("tpuctl.cli.project.new", "new", "Write a training script template (Keras fit, custom loop, TPU, parameter server, Keras on JAX) in a folder."),
    "offers": ("tpuctl.cli.offers", "offers", "Where a TPU type can be had (zone, spot/on-demand, price, quota, bucket), best first."),
    "profile": ("tpuctl.cli.diagnosis.profile", "profile", "Profile every worker of a running launch at once; say where its time goes."),
    "recreate": ("tpuctl.cli.node_ops", "recreate", "Create a TPU VM again from its saved spec."),
    "report": ("tpuctl.cli.diagnosis.report", "report", "Show where a run's wall time went (start-up, steps, checkpoints, restarts) and its goodput."),
    "runs": ("tpuctl.cli.runs", "runs", "List your runs, running and ended, every backend: state, exit status, logs."),
    "runtimes": ("tpuctl.cli.node_info", "runtimes", "List the TPU VM runtime versions a zone offers."),
    "ssh": ("tpuctl.cli.ssh_cmd", "ssh", "Run a command on every host of a TPU VM slice; free a stale TPU (--cleanup)."),
    "stacks": ("tpuctl.cli.diagnosis.stacks", "stacks", "Show every worker's Python stacks in a running launch, without stopping it."),
    "start": ("tpuctl.cli.node_ops", "start", "Start a stopped TPU VM."),
    "stop": ("tpuctl.cli.runs", "stop", "Stop a run of yours and its workers or job."),
    "stop-vm": ("tpuctl.cli.node_ops", "stop_vm", "Stop a TPU VM (single-host); `tpuctl start` starts it again."),
    "tail": ("tpuctl.cli.tail", "tail", "Follow scalars and checkpoints as training writes them (local or gs://)."),
    "tf-config": ("tpuctl.cli.tf_config", "tf_config", "Print or check TF_CONFIG for every task of a cluster."),
}


class LazyGroup(click.Group):
    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        with _closed_output():
            return self._parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        with _closed_output():
            return super().invoke(ctx)

    def _parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """Refuse a NUL byte in any argument before a command sees it.

        No real command line can carry one (argv is C strings), but a caller in this
        process can, and every path option would meet it as a ValueError from open()."""
        for arg in args:
            inputs.check_text(arg, "argument")
        if all(arg == "--debug" for arg in args) and not ctx.resilient_parsing:  # shell completion parses [] too
            # A newcomer's first touch: the help as help, not flattened into an error line.
            # Exit 2 as click >= 8.2 and gcloud do (no command is a usage error, and a script
            # that runs `tpuctl` alone should not pass); click 8.1 alone would exit 0.
            click.echo(ctx.get_help(), err=True, color=ctx.color)
            ctx.exit(USAGE)
        return super().parse_args(ctx, args)

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0]
        if name == "help":
            return name, _help_command, args[1:]
        if name not in COMMANDS and not name.startswith("-"):
            raise unknown_command(name)
        return super().resolve_command(ctx, args)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module, attr, _ = COMMANDS[cmd_name]
        command: click.Command = getattr(importlib.import_module(module), attr)
        refuse_empty_values(command)
        output_flags.accept_aliases(command)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][2]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


_GIVEN = (click.core.ParameterSource.COMMANDLINE, click.core.ParameterSource.ENVIRONMENT, click.core.ParameterSource.DEFAULT_MAP)


# (command, parameter) -> what an empty value there almost always means: the docs' `--check "$TF_CONFIG"`.
_EMPTY_BECAUSE = {("tf-config", "check"): "is TF_CONFIG unset in this shell? `tpuctl tf-config --check` alone reads the variable"}

_REFUSING: weakref.WeakSet[click.Parameter] = weakref.WeakSet()  # parameters already checked (commands are imported once)


def refuse_empty_values(command: click.Command) -> None:
    """Every option and argument of `command` (and of its subcommands) refuses an empty value.

    `--log-dir ''` or `--env ''` is a mistake (an unset shell variable, most often) that
    would otherwise be read as "here" or "nothing" deep in the command; one rule at the
    entry point refuses it the way any other bad value is refused. A script's or remote
    command's own arguments (nargs=-1) are theirs: an empty one is passed on."""
    for param in command.params:
        if param in _REFUSING or getattr(param, "is_flag", False) or param.nargs == -1:
            continue
        param.callback = _refusing_empty(param.callback)
        _REFUSING.add(param)
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            refuse_empty_values(sub)


def _refusing_empty(inner: Callable[[click.Context, click.Parameter, Any], Any] | None) -> Callable[[click.Context, click.Parameter, Any], Any]:
    def check(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        values = value if isinstance(value, tuple) else (value,)
        if any(isinstance(v, str) and not v.strip() for v in values) and ctx.get_parameter_source(str(param.name)) in _GIVEN:
            shown_as = param.get_error_hint(ctx)
            # Most often an unset shell variable; where the variable is as good as certain, name it.
            likely = _EMPTY_BECAUSE.get((str(ctx.command.name), str(param.name)), "an unset shell variable?")
            raise click.BadParameter(f"an empty value is not allowed ({likely})", ctx=ctx, param=param, param_hint=shown_as)
        return inner(ctx, param, value) if inner is not None else value

    return check


@contextlib.contextmanager
def _closed_output() -> Iterator[None]:
    """A reader that went away (`tpuctl ... | head -0`) ends the command in one line.

    Raised as TpuctlError here, inside click's main, because click itself turns a broken
    pipe into a silent exit 1. What is still buffered for the closed pipe goes to
    /dev/null, or Python's own flush at exit would print a second error."""
    try:
        yield
    except BrokenPipeError:
        with contextlib.suppress(OSError, AttributeError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        raise TpuctlError("the output was closed before everything was written (broken pipe)", exit_code=FAILED) from None


def _usable_streams() -> None:
    """Make stdout and stderr safe to write anything to, or refuse to start.

    A closed stdout (`>&-`) makes Python's sys.stdout None: click would drop every line and
    exit 0, rich would raise. A terminal whose encoding cannot show a character
    (PYTHONIOENCODING=ascii, a latin-1 locale) would raise UnicodeEncodeError in the middle of
    a table: such characters are written as backslash escapes instead. COLUMNS and LINES are made sizes that rich,
    click and shutil can all take (terminal.settle_size)."""
    terminal.settle_size(os.environ)
    for stream in (sys.stdout, sys.stderr):
        if stream is not None and isinstance(stream, io.TextIOWrapper) and stream.errors == "strict":
            stream.reconfigure(errors="backslashreplace")
    if sys.stdout is None:
        raise TpuctlError("stdout is closed: nothing tpuctl prints could be seen", hint="redirect it to /dev/null to discard it", exit_code=FAILED)


def unknown_command(name: str) -> TpuctlError:
    """The closest command names, as git and gcloud suggest them: click's own suggestion
    needs every command imported, which a lazy group never does."""
    close = difflib.get_close_matches(name, COMMANDS, n=2)
    hint = f"did you mean {' or '.join(repr(c) for c in close)}?" if close else "tpuctl --help lists them"
    return TpuctlError(f"no command {name!r}", hint=hint)


@click.command(add_help_option=False, hidden=True)
@click.argument("command", required=False)
@click.pass_context
def _help_command(ctx: click.Context, command: str | None) -> None:
    """`tpuctl help [COMMAND]`, the git and gcloud habit: the same text as `--help`."""
    group = ctx.find_root()
    if command is None:
        click.echo(group.get_help())
        return
    if command not in COMMANDS:
        raise unknown_command(command)
    found = cli.get_command(group, command)
    assert found is not None
    click.echo(found.get_help(click.Context(found, info_name=command, parent=group)))


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tpuctl")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """tpuctl: take a TensorFlow training script from a laptop to a Cloud TPU slice or GPU hosts."""
    # --debug is read by main() itself: errors it must show raise after this context is gone.
    name = ctx.invoked_subcommand
    if name is None or name not in COMMANDS:
        return
    keys = getattr(importlib.import_module(COMMANDS[name][0]), "CONFIG_KEYS", None)
    if keys:
        from tpuctl.settings import files as config
        ctx.default_map = {name: config.section_defaults(name, keys)}


def _print_error(message: str, hint: str | None = None) -> None:
    """One line, whatever the message quotes: a path or value with a newline, a terminal escape
    or a byte that is not UTF-8 (Python's surrogate escapes) is shown escaped."""
    red = sys.stderr is not None and sys.stderr.isatty() and "NO_COLOR" not in os.environ
    label = "\x1b[31mError:\x1b[0m" if red else "Error:"
    line = f"{label} {one_line(message, _ERROR_CHARS)}"
    if hint:
        line += f" ({one_line(hint, _ERROR_CHARS)})"
    with contextlib.suppress(OSError):  # stderr closed or its reader gone too: the exit status still says it
        click.echo(line, err=True)


_ERROR_CHARS = 2000  # a message quoting a 100k-character argument is cut, not printed whole


def _debug_requested(args: list[str]) -> bool:
    """Whether `--debug` is tpuctl's own: only before the command name, where the group's options go.

    After the command it belongs to that command, and for `launch`/`ssh`/`babysit` to
    the user's script or remote command (`tpuctl launch train.py --debug`, with or
    without `--`); the group's options take no values, so the first word that is not
    an option is the command."""
    for arg in args:
        if arg == "--debug":
            return True
        if arg == "--" or not arg.startswith("-"):
            return False
    return False


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; every expected failure ends as one line on stderr and an exit status."""
    args = sys.argv[1:] if argv is None else argv
    debug = _debug_requested(args)
    try:
        _usable_streams()
        code = cli.main(args=args, prog_name="tpuctl", standalone_mode=False)
    except TpuctlError as err:
        if debug:
            raise
        _print_error(err.message, err.hint)
        sys.exit(err.exit_code)
    except click.exceptions.Abort:
        _print_error("aborted")
        sys.exit(INTERRUPTED)
    except click.ClickException as err:
        if debug:
            raise
        _print_error(err.format_message())
        sys.exit(USAGE if isinstance(err, click.UsageError) else FAILED)
    except click.exceptions.Exit as done:
        sys.exit(done.exit_code)
    sys.exit(code if isinstance(code, int) else 0)
