"""Follow a submitted job to its end, whatever cluster runs it: the job engine.

    submit                    the Scheduler creates the job (under the launch's signal handlers)
    poll every poll_s         describe it: a state change is one notice (`CustomJob 123: RUNNING after 40s`);
                              new replica runs get a log stream each, new batches of lines are shown
    the end                   the last lines drained (drain_s at most), then the Outcome: 0, the exit status
                              the Scheduler names (a failed replica's, else 1), with that replica's last lines
                              and the cause read from them
    SIGINT, SIGTERM, SIGHUP   exit 130; the job is left running (the command that deletes it said, and at a
                              terminal Ctrl-C asks first) or cancelled, as the Scheduler's on_interrupt says

What is the cluster's (kubectl, REST) stays in its Scheduler (tpuctl/launch/follow/scheduler.py).
"""

from __future__ import annotations

import io
import signal
import sys
import time
from dataclasses import replace

from tpuctl.endings import INTERRUPTED, Ending, Kind
from tpuctl.inputs.errors import TpuctlError
from tpuctl.launch.cause import classify
from tpuctl.launch.console.tf_noise import Fold
from tpuctl.launch.follow.scheduler import JobStatus, OnInterrupt, Replica, ReplicaRun, Scheduler
from tpuctl.launch.follow.sinks import Pump, Sinks
from tpuctl.launch.outcome import Failure, JobRef, Outcome
from tpuctl.launch.runner import RunContext
from tpuctl.runs import timeline as tl
from tpuctl.runs.folder import RunFolder
from tpuctl.safety import signals

CANCEL_WAIT_S = 60.0  # how long a cancelled job may take to say it ended before tpuctl stops waiting


class JobFollower:
    """One job followed for one launch: what every job backend's run is once its Scheduler exists."""

    def __init__(self, scheduler: Scheduler, context: RunContext, fold: Fold | None = None) -> None:
        self.scheduler = scheduler
        self.notice = context.notice
        self.context = context  # the run's record (its keeper the one writer) names the job once it exists
        self.timeline = context.timeline  # each state the job is seen in, as it is seen (job_state)
        # TensorFlow's start-up lines (tf_noise.py); whoever made the launch says the Fold's note at its end.
        self.fold = fold if fold is not None else Fold(context.verbose)
        self.folder = RunFolder(context.log_dir)
        self.sinks = Sinks(self.folder, context.writer, colour=context.colour, fold=self.fold, workers=scheduler.workers)
        self.pumps: dict[ReplicaRun, Pump] = {}
        self.state = ""  # the job's state as last seen, and its label in notices
        self.label = ""
        self.following = False  # past the submission and following: its lines are being read
        self.log_warnings: set[str] = set()
        self.started = time.monotonic()

    # -- the whole run ---------------------------------------------------------------------------

    def run(self) -> Outcome:
        """Submit the job and follow it to its end (a detached launch follows it from a process of its own)."""
        # A folder that cannot be written is bad input before anything is submitted, not a job left without logs.
        self.sinks.make_attempt(1)
        try:
            with signals.handled(signals.raise_stopped):
                try:
                    return self._follow(self.scheduler.submit())
                finally:
                    for pump in self.pumps.values():
                        pump.stop()
        except signals.Stopped as stopped:
            if self.scheduler.on_interrupt is OnInterrupt.CANCEL:
                return self._cancel(stopped.signum)
            return self._leave(stopped.signum)

    def _follow(self, first: JobStatus | None) -> Outcome:
        self.following = True
        self._record_job()
        status = first if first is not None else self.scheduler.describe()
        while True:
            self._see(status)
            self._read_logs()
            if status.end is not None:
                self._drain()
                return self._finish(status)
            time.sleep(self.scheduler.poll_s)
            status = self.scheduler.describe()

    def _see(self, status: JobStatus) -> None:
        """Say a new state; follow the lines of replica runs not followed yet."""
        if status.state != self.state:
            self.state, self.label = status.state, status.label or status.state
            ref = self.scheduler.job_ref()
            self.notice(f"{ref.kind} {ref.name}: {self.label} after {time.monotonic() - self.started:.0f}s")
            if self.timeline is not None:
                self.timeline.event(tl.JOB_STATE, state=status.state, label=self.label, job=ref.label)
        for run in status.running:
            if run not in self.pumps:
                sink = self.sinks.sink(run.worker, run.attempt)
                self.pumps[run] = Pump(self.scheduler.open_log(run), sink, self.notice)

    def _read_logs(self) -> int:
        """Show the lines that came since the last poll; how many entries came."""
        try:
            batches = self.scheduler.read_logs()
        except TpuctlError as err:  # logs are a view: a refused or failing call must not end the run
            if str(err) not in self.log_warnings:
                self.log_warnings.add(str(err))
                self.notice(f"warning: cannot read the job's logs: {err}")
            return 0
        for batch in batches:
            text = "".join(part + "\n" for entry in batch.texts for part in entry.rstrip("\n").split("\n"))
            self.sinks.sink(batch.worker, batch.attempt).pump(io.BytesIO(text.encode("utf-8", "replace")))
        return sum(len(batch.texts) for batch in batches)

    def _drain(self) -> None:
        """The last lines trail the job's end (a stream's last bytes, entries a logging service ingests late):
        wait for every stream to end and each poll to bring nothing until the Scheduler says all is in, or drain_s."""
        deadline, quiet = time.monotonic() + self.scheduler.drain_s, 0
        while time.monotonic() < deadline:
            for pump in self.pumps.values():
                pump.join(timeout=max(0.0, deadline - time.monotonic()))
            quiet = quiet + 1 if not self._read_logs() else 0
            if self.scheduler.logs_settled(quiet):
                return
            time.sleep(self.scheduler.poll_s)

    # -- endings -------------------------------------------------------------------------------

    def _finish(self, status: JobStatus) -> Outcome:
        if status.end is Kind.SUCCEEDED:
            return self._outcome(0)
        if status.end is Kind.CANCELLED:
            return self._interrupted("cancelled outside this launch")
        failure = None if status.failed is None else self._failure(status.failed)
        return self._outcome(status.exit_code, failure=failure, message=status.message)

    def _failure(self, replica: Replica) -> Failure:
        tail = self.sinks.tail(replica.worker)
        return Failure(
            worker=replica.worker,
            host=replica.host,
            ending=Ending.of_exit(replica.exit_code, replica.status),
            runtime_s=None,
            tail=tail,
            log=self.sinks.log_path(replica.worker, replica.attempt),
            # A container's status is its process's, 128+N for signal N; a cluster may name the OOM killer.
            cause=classify(replica.returncode, tail, oom_reported=replica.oom_reported),
        )

    def _outcome(self, code: int, failure: Failure | None = None, message: str = "", ended_as: str = "", interrupted: bool = False) -> Outcome:
        return Outcome(
            exit_code=code,
            attempts=self.scheduler.attempts(),
            elapsed_s=time.monotonic() - self.started,
            failure=failure,
            interrupted=interrupted,
            job=replace(self.scheduler.job_ref(), message=message, ended_as=ended_as),
        )

    def _interrupted(self, ended_as: str = "") -> Outcome:
        return self._outcome(INTERRUPTED, message=self.state, ended_as=ended_as, interrupted=True)

    # -- a signal ------------------------------------------------------------------------------

    def _record_job(self) -> None:
        """The run's record names the job as soon as it exists, so that `tpuctl runs` shows it while it runs."""
        amend = self.context.amend_record
        if self.context.record is not None and amend is not None:  # the record is a view: a failed write costs a warning, never the run
            amend(job=self.scheduler.job_ref().label)

    def _leave(self, signum: int) -> Outcome:
        """The job runs on. Only a person at a terminal pressing Ctrl-C is asked whether to delete it;
        `kill` and a lost terminal are not: they are told how."""
        outcome = self._interrupted()
        job = outcome.job
        assert job is not None
        where = f"{job.kind} {job.name} (namespace {job.namespace})"
        if self.folder.stop_request.exists():  # `tpuctl stop`: the user asked for the run to end, job and all
            self.scheduler.cancel()
            self.notice(f"stopped by tpuctl stop: deleted {where}")
            return _deleted(outcome, job)
        if signum == signal.SIGINT and _interactive():
            import click

            try:
                delete = click.confirm(f"tpuctl: interrupted. Delete {where} and its {job.unit}s?", default=False, err=True)
            except (click.Abort, KeyboardInterrupt, EOFError, signals.Stopped):
                delete = False
            if delete:
                self.scheduler.cancel()
                self.notice(f"deleted {where}")
                return _deleted(outcome, job)
        self.notice(f"received {signal.Signals(signum).name}; {where} keeps running. Delete it with: {job.delete_command}")
        return outcome

    def _cancel(self, signum: int) -> Outcome:
        """Ask the cluster to cancel, and wait a little for it to say so; a second Ctrl-C stops the waiting, never the cancel."""
        ref = self.scheduler.job_ref()
        self.notice(f"received {signal.Signals(signum).name}; cancelling {ref.kind} {ref.name}")
        started = time.monotonic()
        with signals.handled(signals.raise_stopped):
            try:
                self.scheduler.cancel()
                while time.monotonic() - started < CANCEL_WAIT_S:
                    status = self.scheduler.describe()
                    self._see(status)
                    if status.end is not None:
                        if self.following:
                            self._read_logs()
                        if status.end is not Kind.CANCELLED:  # it ended by itself first: that is its outcome
                            return self._finish(status)
                        return self._interrupted(Kind.CANCELLED.value)
                    time.sleep(self.scheduler.poll_s)
            except signals.Stopped:
                pass  # a second Ctrl-C: stop waiting; the cancel was asked for if the call got through
            except TpuctlError as err:
                self.notice(f"could not cancel {ref.kind} {ref.name}: {err}")
                return self._interrupted(f"left running: cancel it with {ref.delete_command}")
        return self._interrupted(f"asked to cancel (still {self.label} after {time.monotonic() - started:.0f}s)")


def _deleted(outcome: Outcome, job: JobRef) -> Outcome:
    """The outcome of a job this launch deleted as it was interrupted: a new value, its job marked deleted."""
    return replace(outcome, job=replace(job, deleted=True))


def _interactive() -> bool:
    return sys.stdin.isatty()
