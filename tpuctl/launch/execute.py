"""Run a prepared launch: claim its log folder, provision its machine if it has one, hand the Runner its context, keep the outcome.

Every backend's run passes here, so the folder rule (one folder, one launch), the provisioning step (a machine made
for the run before the backend's run, handed to it as hosts, ended after it: `_provisioned`), the outcome record and
the scrubbing of secret values from tpuctl's own words hold for all.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from dataclasses import replace
from types import FrameType
from typing import TextIO

from tpuctl.cluster.hosts import HostEntry
from tpuctl.endings import INTERRUPTED, Kind, state_of
from tpuctl.inputs.errors import TpuctlError
from tpuctl.inputs.private_files import write_private
from tpuctl.launch import publish, secret_values
from tpuctl.launch.console import logs
from tpuctl.launch.job import Job
from tpuctl.launch.outcome import Outcome
from tpuctl.launch.prepare import Launch
from tpuctl.launch.runner import Provisioner, RunContext
from tpuctl.runs import goodput, recorded
from tpuctl.runs import timeline as tl
from tpuctl.runs.folder import RunFolder
from tpuctl.safety import signals


def execute(
    launch: Launch, stream: TextIO, notice: Callable[[str], None], *, detached: bool = False, started: Callable[[], None] | None = None
) -> Outcome:
    """Run a prepared launch: worker lines to `stream`, tpuctl's own to `notice`; the outcome also lands in LOG_DIR/outcome.json
    and the run's record (tpuctl/runs/records.py) says how it ended. `started` is called once the run holds its folder and
    its record says it is running (a detached launch's parent waits for that).

    tpuctl's own words (notices, errors, which may relay kubectl's or an API's) never carry a secret value.
    """
    folder = RunFolder(launch.log_dir)
    job = launch.job
    say = _scrubbing(notice, job)
    on = launch.runner.slice_cost(say)
    with recorded.kept(folder, launch.run_id, launch.runner.name, job.script, say, detached=detached, on=on) as keeper:
        timeline = tl.Timeline(folder.timeline, warn=say)  # opened once the run holds its folder
        context = RunContext(
            run_id=launch.run_id,
            log_dir=launch.log_dir,
            writer=logs.LineWriter(stream),
            notice=say,
            colour=logs.use_colour(stream),
            tail_view=launch.options.tail_view,
            verbose=launch.options.verbose,
            timeline=timeline,
            keeper=keeper,
        )
        try:
            if started is not None:
                started()
            timeline.event(tl.RUN_START, run_id=launch.run_id, backend=launch.runner.name, script=os.path.basename(job.script))
            publisher = _publisher(launch, job.model_dir, folder, context)
            if publisher is not None:
                publisher.start(timeline)
            try:
                made = launch.runner.provisioner()  # the step that makes the run's machine first, and ends it after the run
                outcome = launch.runner.run(job, context) if made is None else _provisioned(made, job, context, launch.runner.run)
                timeline.event(tl.RUN_END, exit_code=outcome.exit_code, state=state_of(outcome.ending))
            finally:
                timeline.close()
                if publisher is not None:
                    publisher.stop()  # the run's last view, with its end
            outcome = secret_values.scrubbed_outcome(replace(outcome, goodput=_goodput(folder)), job)
            summary = outcome.to_json(backend=launch.runner.name, run_id=launch.run_id, log_dir=launch.log_dir)
            try:
                write_private(folder.outcome_file, json.dumps(summary, indent=2) + "\n")
            except OSError as err:  # a full disk loses the record, never the exit status or the summary
                context.notice(f"warning: cannot write {folder.outcome_file}: {err.strerror or err}")
            share = outcome.goodput.total.goodput if outcome.goodput is not None else None
            keeper.end(state_of(outcome.ending), outcome.exit_code, job=outcome.job.label if outcome.job else None, goodput=share)
        except TpuctlError as err:  # the same error (a lost connection, a hunt that found nothing), in scrubbed words
            secret_values.scrub_error(err, job)
            raise
    return outcome


def _provisioned(provisioner: Provisioner, job: Job, context: RunContext, run: Callable[[Job, RunContext], Outcome]) -> Outcome:
    """The backend's `run` on the machine `provisioner` makes for it, handed its hosts; then the machine ended by how
    the run ended (Provisioner.finish).

    A stopping signal ends the run, however far it got, with its machine deleted: it raises Stopped from the first
    create to the run's end, save while the supervisor routes signals its own way (it stops the workers), and is
    ignored once the end has begun. Nowhere between is SIGTERM's default left, which kills this process before the
    delete (the gap between READY and the supervisor: --cleanup, the hosts' preflight)."""
    ended: Kind | None = None
    stopping = [True]

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if stopping[0]:
            raise signals.Stopped(signum)

    with signals.handled(on_signal):
        try:
            hosts: list[HostEntry] | None = None
            try:
                hosts = provisioner.provision(job, context)
                outcome = run(job, replace(context, hosts=tuple(hosts)))
            except (KeyboardInterrupt, signals.Stopped) as stopped:
                ended = Kind.STOPPED
                doing = f"creating {provisioner.machine(context.run_id)}" if hosts is None else f"running on {provisioner.machine(context.run_id)}"
                context.notice(f"received {_signal_name(stopped)}; no longer {doing}")
                raise TpuctlError(f"interrupted while {doing} for the run", exit_code=INTERRUPTED) from None
            ended = outcome.ending.kind
            return outcome
        except TpuctlError as err:
            ended = Kind.STOPPED if err.exit_code == INTERRUPTED else ended
            raise
        finally:
            stopping[0] = False
            provisioner.finish(ended, context)


def _signal_name(stopped: BaseException) -> str:
    """The signal that stopped a wait, by name (a KeyboardInterrupt is SIGINT's)."""
    return signal.Signals(stopped.signum).name if isinstance(stopped, signals.Stopped) else "SIGINT"


def _scrubbing(notice: Callable[[str], None], job: Job) -> Callable[[str], None]:
    """`notice` for tpuctl's own lines, which never carry the job's secret values."""
    return lambda line: notice(secret_values.scrub(line, job))


def _goodput(folder: RunFolder) -> goodput.Report | None:
    """Where the run's time went, from its timeline as the run ended; None where it has none or nothing readable
    (the report is a view of the run: `tpuctl report` says what is wrong with the file)."""
    try:
        return goodput.of_folder(folder, live=False)
    except TpuctlError:
        return None


def _publisher(launch: Launch, model_dir: str | None, folder: RunFolder, context: RunContext) -> publish.Publisher | None:
    """The view's publisher, where this machine writes the model dir the workers write; else one notice line, once."""
    if model_dir is None:
        return None
    if not publish.reachable(model_dir, shares_disk=launch.runner.shares_disk):
        where = f"{model_dir} is on the {launch.runner.name} workers' own disks, not this machine's"
        context.notice(f"note: the run's view is not published into the model dir: {where}; a gs:// --model-dir gets it (TensorBoard's tpuctl tab)")
        return None
    return publish.Publisher(folder, launch.run_id, model_dir, context.notice)
