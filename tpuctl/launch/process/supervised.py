"""What the process backends (local, ssh) share once their workers are processes: the Supervisor's run.

Both hand the Supervisor a Starter that starts WorkerSpecs; everything after
that (logs, fail-fast, restarts, the --tail view) is the same code.
"""

from __future__ import annotations

from dataclasses import replace

from tpuctl.launch.console.side_tail import SideTail
from tpuctl.launch.console.tf_noise import Fold
from tpuctl.launch.job import Job
from tpuctl.launch.outcome import Outcome
from tpuctl.launch.process.starter import Starter
from tpuctl.launch.process.supervisor import Supervisor
from tpuctl.launch.runner import RunContext
from tpuctl.safety import reaper


def run_supervised(starter: Starter, job: Job, context: RunContext) -> Outcome:
    side = SideTail.start(job.model_dir, context.writer.write) if context.tail_view and job.model_dir else None
    fold = Fold(context.verbose, job.framework)
    supervisor = Supervisor(
        starter, writer=context.writer, notice=context.notice, log_dir=context.log_dir, colour=context.colour, fold=fold, record=context.record,
        timeline=context.timeline, amend_record=context.amend_record,
    )
    # Local workers' escapees come to this process (see reaper.adopt_orphans); an ssh launch's
    # workers run on the hosts, and its ControlMaster must outlive the run.
    before = None if starter.remote else reaper.adopt_orphans()
    try:
        outcome = supervisor.run(job, context.run_id)
    finally:
        if side is not None:
            side.stop()
        escaped = reaper.kill_adopted(before) if before is not None else []
    notes: list[str] = []  # said as they come, and kept in the outcome's notes
    if escaped:
        notes.append(f"killed {len(escaped)} process(es) that had escaped their worker's reaper: {', '.join(map(str, escaped))}")
        context.notice(notes[-1])
    for folded in (fold.note(), fold.shutdown_note()):
        if folded is not None:
            context.notice(folded)
    if side is not None:
        for line in side.finish():
            context.notice(line)
            notes.append(line)
        if side.failure is not None:
            notes.append(side.failure)  # already shown when it happened, among the workers' lines
    return replace(outcome, notes=(*outcome.notes, *notes))
