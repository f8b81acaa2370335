"""Run a prepared launch: claim its log folder, hand the Runner its context, keep the outcome.

Every backend's run passes here, so the folder rule (one folder, one launch), the
outcome record and the scrubbing of secret values from tpuctl's own words hold for all.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any, TextIO

from tpuctl.endings import state_of
from tpuctl.inputs.errors import TpuctlError
from tpuctl.inputs.private_files import write_private
from tpuctl.launch import publish, secret_values
from tpuctl.launch.console import logs
from tpuctl.launch.outcome import Outcome
from tpuctl.launch.prepare import Launch
from tpuctl.launch.runner import RunContext
from tpuctl.runs import goodput, recorded
from tpuctl.runs import timeline as tl
from tpuctl.runs.folder import RunFolder


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
    context = RunContext(
        run_id=launch.run_id,
        log_dir=launch.log_dir,
        writer=logs.LineWriter(stream),
        notice=lambda line: notice(secret_values.scrub(line, job)),
        colour=logs.use_colour(stream),
        tail_view=launch.options.tail_view,
        verbose=launch.options.verbose,
    )
    on = launch.runner.slice_cost(context.notice)
    with recorded.kept(folder, launch.run_id, launch.runner.name, job.script, context.notice, detached=detached, on=on) as keeper:
        context.record = keeper.record if keeper.written else None

        def amend(**fields: Any) -> None:  # Keeper.amend's keywords, each typed there
            keeper.amend(**fields)
            if context.record is not None:
                context.record = keeper.record  # what the supervisor and a run's own VM read is the record as written

        context.amend_record = amend
        context.timeline = tl.Timeline(folder.timeline, warn=context.notice)  # opened once the run holds its folder
        try:
            if started is not None:
                started()
            context.timeline.event(tl.RUN_START, run_id=launch.run_id, backend=launch.runner.name, script=os.path.basename(job.script))
            publisher = _publisher(launch, job.model_dir, folder, context)
            if publisher is not None:
                publisher.start(context.timeline)
            try:
                outcome = launch.runner.run(job, context)
                context.timeline.event(tl.RUN_END, exit_code=outcome.exit_code, state=state_of(outcome.ending))
            finally:
                context.timeline.close()
                if publisher is not None:
                    publisher.stop()  # the run's last view, with its end
            outcome.goodput = _goodput(folder)
            secret_values.scrub_outcome(outcome, job)
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
