"""What the process backends (local, ssh) share once their workers are processes: the Supervisor's run.

Both hand the Supervisor a Backend that starts WorkerSpecs; everything after
that (logs, fail-fast, restarts, the --tail view) is the same code.
"""

from __future__ import annotations

from tpuctl.launch.outcome import Outcome
from tpuctl.launch.plan import Job
from tpuctl.launch.runner import RunContext
from tpuctl.launch.supervisor import Backend, Supervisor


def run_supervised(backend: Backend, job: Job, context: RunContext) -> Outcome:
    follower = None
    if context.tail_view and job.model_dir:
        from tpuctl.watch.follower import Follower

        follower = Follower(job.model_dir, context.writer.write)
        follower.start()
    supervisor = Supervisor(backend, writer=context.writer, notice=context.notice, log_dir=context.log_dir, colour=context.colour)
    outcome = supervisor.run(job, context.run_id)
    if follower is not None:
        for line in follower.finish():
            context.notice(line)
            outcome.notes.append(line)
    return outcome
