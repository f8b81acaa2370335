"""`tpuctl profile [RUN] --duration SECONDS`: profile every worker of a running launch at once (docs/profile.md).

RUN is what `tpuctl stacks` takes, or a launch's LOG_DIR as `tpuctl report` takes it. The capture is tpuctl/runs/profiling.py (asked
of the run's launcher, taken inside each worker); the verdict is tpuctl/profiling/ (a higher layer than the run records, so it is
called from here).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tpuctl import endings
from tpuctl.inputs.errors import FAILED, TpuctlError
from tpuctl.inputs.seconds import Seconds
from tpuctl.launch.option_fields import click_options
from tpuctl.runs.profiling import MAX_DURATION_S, Capture
from tpuctl.ssh.connection import Connection

if TYPE_CHECKING:
    from tpuctl.profiling.verdict import Verdict
    from tpuctl.runs.folder import RunFolder
    from tpuctl.runs.profiling import Hosts
    from tpuctl.runs.records import RunRecord


def _say(line: str) -> None:
    click.echo(f"tpuctl: {line}", err=True)


@click.command("profile")
@click.argument("run_id", metavar="[RUN|LOG_DIR]", required=False)
@click.option(
    "--duration", "duration_s", type=Seconds(maximum=MAX_DURATION_S), metavar="S", default=2.0, show_default=True,
    help=f"Seconds to trace every worker, from a step's end to the end of the step running then (0 < S <= {MAX_DURATION_S:g}).",
)
@click.option(
    "--json", "as_json", is_flag=True,
    help="JSON: run_id, profile_dir, session, files (worker: file), missing (worker: why), hosts_dir (an ssh run's, on its hosts), verdict.",
)  # fmt: skip
@click.option("--no-verdict", is_flag=True, help="Capture only: skip the terminal verdict (it needs the `profile` extra).")
@click_options(Connection)
def profile(run_id: str | None, duration_s: float, as_json: bool, no_verdict: bool, **connection: Any) -> None:
    """Profile every worker of a running launch of yours (default: the newest) at once, and say what it shows.

    RUN is a run id or a unique prefix, or the path of the launch's log folder (LOG_DIR).

    Each worker traces itself from the end of its next training step (Keras fit's) for about
    --duration seconds, to the end of the step then running; the run keeps training. The session
    is written in TensorBoard's layout, PROFILE_DIR/plugins/profile/SESSION/, one
    HOST_TASK.xplane.pb per worker; PROFILE_DIR is the run's model dir, else its log dir. A worker
    that takes no capture is named with why (no training step within 20 s: a custom loop, a
    stopped or hung worker; a multi-worker run where stopping a profile is not safe) and the
    others are still captured (exit 0); exit 1 when none was. Local launches (--rehearse ones
    too), ssh and TPU VM launches; Kubernetes and Vertex AI jobs take `launch --profile
    START-END` instead. An ssh run's files, unless its model dir is gs://, are copied back from
    its hosts (reached as the launch reached them; --ssh-* options here replace those) into
    LOG_DIR/plugins/profile/SESSION/.
    """
    from tpuctl.runs import profiling, records

    folder, found, chosen = records.find_or_folder(run_id, _say, running=True)
    record = found or records.record_of(folder, _say)
    if chosen is not None:
        _say(chosen)
    if not as_json:
        _say(f"tracing {record.run_id}'s workers for {duration_s:g}s ...")
    result = profiling.capture(record, duration_s, _hosts(record, Connection(**connection)))  # Connection's own fields
    verdict = None if no_verdict or not result.files else _verdict(result)
    if result.session is not None:
        _keep(record.folder, result, verdict.to_json() if verdict is not None else None)
    if as_json:
        click.echo(json.dumps({**result.to_json(), "verdict": verdict.to_json() if verdict is not None else None}, indent=2))
    else:
        for line in render(result, verdict.lines() if verdict is not None else None):
            click.echo(line)
    if not result.files:
        now = records.live_state(record)
        if now.state != endings.RUNNING:
            raise TpuctlError(f"run {record.run_id} ended during the capture ({now.state}): no worker sent a profile", exit_code=FAILED)
        first = next(iter(result.missing.items()), ("", "no worker was asked"))
        hint = "`tpuctl logs` shows whether the workers are still training"
        raise TpuctlError(f"no worker sent a profile ({first[0]}: {first[1]})", hint=hint, exit_code=FAILED)
    for worker, why in result.missing.items():
        _say(f"warning: {worker} sent no profile: {why}; the others' are in the session")


def _hosts(record: RunRecord, connection: Connection) -> Hosts | None:
    """An ssh run's hosts, reached as the launch reached them (the ssh options it recorded) unless --ssh-* options
    are given here; None for a run on this machine."""
    if record.backend != "ssh":
        return None
    from tpuctl.ssh.profile import SshHosts, recorded_options

    recorded = None if connection != Connection() else recorded_options(record.folder.latest_profilers())
    return SshHosts(recorded or connection.ssh_options())


def _keep(folder: RunFolder, result: Capture, verdict: dict[str, Any] | None) -> None:
    """The session and its verdict, kept in the run's folder for the run's view (`report --timeline`, TensorBoard's tpuctl tab)."""
    from tpuctl.runs import view

    try:
        view.keep_profile(folder, str(result.session), result.profile_dir, verdict)
    except OSError as err:
        _say(f"warning: cannot keep the verdict in {folder.path}: {err.strerror or err}")
    except TpuctlError as err:  # LOG_DIR/profiles is not a private folder of the user's (a link): the capture stands
        _say(f"warning: the verdict is not kept: {err.message}")


def _verdict(result: Capture) -> Verdict:
    from tpuctl.profiling import sessions, verdict

    assert result.session is not None
    names = {Path(file).name.removesuffix(".xplane.pb"): worker for worker, file in result.files.items()}
    return verdict.verdict(sessions.session_files(result.profile_dir, Path(result.session).name), names=names)


def render(result: Capture, verdict: list[str] | None) -> list[str]:
    """Where the session went, each worker's file, the verdict, and the commands that open it."""
    where = result.session or "no session written"
    lines = [f"profile of {result.run_id} ({len(result.files)} of {len(result.files) + len(result.missing)} workers, {result.duration_s:g}s): {where}"]
    if result.hosts_dir is not None:
        lines.append(f"  (copied from the hosts' {result.hosts_dir})")
    lines += [f"  {worker}  {Path(path).name}" for worker, path in result.files.items()]
    if not result.files:
        return lines
    if verdict is not None:
        lines += ["", *verdict]
    lines += [
        "",
        "open it (with the profile extra: pip install 'tpuctl[profile]'):",
        f"  tensorboard --logdir {result.profile_dir}   (the Profile tab)",
        f"  xprof --logdir {result.profile_dir} --port 8791",
    ]
    return lines
