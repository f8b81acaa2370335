"""Runs a Job's plan on a process backend, attempt after attempt: the restart policy.

Shared by every process backend. It knows nothing about SSH; a Starter knows
nothing about restarts. One attempt's mechanics (start, watch, deadlines, stop)
are tpuctl/launch/process/attempt.py's; here is only what comes between
attempts: which failure spends a restart, which a preemption, when to give up,
and what the user is told.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from types import FrameType

from tpuctl.endings import INTERRUPTED
from tpuctl.launch import cause
from tpuctl.launch.console import logs
from tpuctl.launch.console.tf_noise import Fold
from tpuctl.launch.job import Job
from tpuctl.launch.outcome import Failure, Outcome
from tpuctl.launch.process import profiles, stacks
from tpuctl.launch.process.attempt import Wiring, preempted, run_attempt
from tpuctl.launch.process.events import Inbox, StacksRequested
from tpuctl.launch.process.starter import Starter
from tpuctl.runs import stacks as stacks_request
from tpuctl.runs import timeline as tl
from tpuctl.runs.folder import RunFolder
from tpuctl.runs.records import RunRecord
from tpuctl.safety import signals


class Supervisor:
    def __init__(
        self,
        starter: Starter,
        *,
        writer: logs.LineWriter,
        notice: Callable[[str], None],
        log_dir: Path,
        colour: bool,
        fold: Fold | None = None,
        record: RunRecord | None = None,
        timeline: tl.Timeline | None = None,
        amend_record: Callable[..., None] | None = None,
    ) -> None:
        self.starter = starter
        self.record = record  # the run's record, which says while SIGQUIT shows the stacks (tpuctl stacks)
        self.amend_record = amend_record  # how the record is changed where another part of the run changes it too
        self.notice = notice
        self.log_dir = log_dir
        self.notes: list[str] = []  # what went wrong beside the workers (a log that could not be written)
        self.timeline = timeline  # attempts, workers, failures and restarts go there as they happen
        self._inbox = Inbox()
        self._profiles = profiles.Desk(RunFolder(log_dir), self._log_warning)
        self._wiring = Wiring(
            starter=starter,
            folder=RunFolder(log_dir),
            inbox=self._inbox,
            collector=stacks.StackCollector(),
            writer=writer,
            notice=notice,
            warn=self._log_warning,
            colour=colour,
            fold=fold,
            timeline=timeline,
            profiles=self._profiles,
        )

    def run(self, job: Job, run_id: str) -> Outcome:
        """Attempts until one succeeds, is interrupted, or no restart is left: a preemption spends
        one of --max-preemptions, any other failure one of --max-restarts."""
        started = time.monotonic()
        restarts = preemptions = 0
        self._profiles.start()
        with signals.handled(self._on_signal), self._stacks_on_request(), contextlib.closing(self._profiles):
            attempt = 0
            while True:
                attempt += 1
                outcome = replace(run_attempt(self._wiring, job, run_id, attempt), attempts=attempt, preemptions=preemptions)
                if self._inbox.signals and not outcome.interrupted:
                    outcome = Outcome(INTERRUPTED, attempt, 0.0, outcome.failure, interrupted=True, preemptions=preemptions)
                if outcome.exit_code == 0 or outcome.interrupted:
                    break
                failure = outcome.failure
                assert failure is not None
                if preempted(failure) or self._went_with_its_node(failure, attempt):
                    if preemptions == job.max_preemptions:
                        self.notice(f"{failure.worker} was preempted ({failure.status}): --max-preemptions {job.max_preemptions} is spent; not restarting")
                        break
                    preemptions += 1
                    self.notice(
                        f"{failure.worker} was preempted ({failure.status}); restarting all workers from the last checkpoint "
                        f"(preemption {preemptions}/{job.max_preemptions}, attempt {attempt + 1})"
                    )
                    self._restart(attempt, "preemption")
                    self.starter.after_preemption(self.notice)
                    continue
                if restarts == job.max_restarts:
                    break
                restarts += 1
                why = f": {failure.cause.summary}" if failure.cause is not None and failure.cause.kind != cause.EXIT else ""
                self.notice(f"{failure.worker} failed ({failure.status}){why}; restarting all workers (attempt {attempt + 1}/{job.attempts + preemptions})")
                self._restart(attempt, "failure")
        return replace(outcome, elapsed_s=time.monotonic() - started, notes=(*outcome.notes, *self.notes))

    def _restart(self, attempt: int, why: str) -> None:
        if self.timeline is not None:
            self.timeline.event(tl.RESTART, attempt=attempt, why=why, next_attempt=attempt + 1)

    def _went_with_its_node(self, failure: Failure, attempt: int) -> bool:
        """A TPU VM's preemption ends no worker with 42: its hosts go down. Its Starter tells that from a crash."""
        condition = self.starter.lost_to_preemption(failure)
        if condition:
            self.notice(f"{failure.worker} was lost with its TPU VM, which is {condition} now: a preemption")
            if self.timeline is not None:
                self.timeline.event(tl.PREEMPTED, attempt=attempt, worker=failure.worker, status=f"lost with its TPU VM ({condition})")
        return bool(condition)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._inbox.signalled(signum)

    @contextlib.contextmanager
    def _stacks_on_request(self) -> Iterator[None]:
        """SIGQUIT (Ctrl-\\, `tpuctl stacks`) shows every worker's stacks; the run's record says so meanwhile."""
        previous = signal.signal(signal.SIGQUIT, lambda signum, frame: self._inbox.put(StacksRequested()))
        try:
            with stacks_request.answering(self.record, self.amend_record) if self.record is not None else contextlib.nullcontext():
                yield
        finally:
            signal.signal(signal.SIGQUIT, previous)

    def _log_warning(self, message: str) -> None:
        """A log that cannot be written: said once on stderr, and kept in the outcome's notes."""
        self.notes.append(message)
        self.notice(message)
