"""Submit a CustomJob and follow it to its end: state changes, every replica's log lines, the exit status.

Log lines come from Cloud Logging (entries:list, filtered by the job's id) and
are tagged by replica as local worker lines are (`[chief:0]`, `[worker:1]`),
saved per replica under LOG_DIR/attempt-1/, and folded of TensorFlow's start-up
chatter as elsewhere. Ctrl-C (or SIGTERM) cancels the job and waits a little
for Vertex to say so; `--detach` returns once the job exists.
"""

from __future__ import annotations

import io
import re
import signal
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tpuctl import signals
from tpuctl.cloud.vertex_api import TERMINAL, JobLogs, LogLine, VertexJobs, job_id
from tpuctl.errors import FAILED, TpuctlError, one_line
from tpuctl.launch.backend import RunContext
from tpuctl.launch.cause import classify
from tpuctl.launch.console import logs
from tpuctl.launch.console.tf_noise import Fold
from tpuctl.launch.outcome import EXIT_INTERRUPTED, Failure, JobRef, Outcome
from tpuctl.private_files import private_dir
from tpuctl.seconds import from_env

DEFAULT_POLL_S = 5.0
CANCEL_WAIT_S = 60.0  # how long a cancelled job may take to say CANCELLED before tpuctl stops waiting
DRAIN_S = 30.0  # how long after the job's end its last log entries may take to arrive
ROLES = ("chief", "worker", "ps", "evaluator")  # worker pools 0..3
_TASK = re.compile(r"workerpool([0-3])-([0-9]{1,6})\Z")
# How Vertex words a replica's failure in the job's error message.
_REPLICA_EXIT = re.compile(r"replica (workerpool[0-3]-[0-9]+) exited with a non-zero status of (-?[0-9]+)")


def poll_interval() -> float:
    return from_env("TPUCTL_VERTEX_POLL_S", DEFAULT_POLL_S)


def worker_name(task: str) -> str:
    """workerpool1-0 -> worker:0: the names TF_CONFIG gives the same replicas inside the job."""
    match = _TASK.match(task)
    return f"{ROLES[int(match[1])]}:{match[2]}" if match else (task or "job")


def console_url(name: str, project: str, region: str) -> str:
    return f"https://console.cloud.google.com/vertex-ai/locations/{region}/training/{job_id(name)}/cpu?project={project}"


class VertexRun:
    def __init__(self, jobs: VertexJobs, logs_api: Callable[[str], JobLogs], context: RunContext, region: str, poll_s: float) -> None:
        self.jobs = jobs
        self.new_logs = logs_api
        self.context = context
        self.region = region
        self.poll_s = poll_s
        self.fold = Fold(context.verbose)
        self.started = time.monotonic()
        self.attempt_dir = context.log_dir / "attempt-1"
        self.tails: dict[str, deque[str]] = {}
        self.positions: dict[str, int] = {}
        self.state = ""
        self.name = ""
        self.logs_of_job: JobLogs | None = None
        self.log_warnings: set[str] = set()

    # -- the whole run ---------------------------------------------------------------------------

    def run(self, body: dict[str, Any], detach: bool) -> Outcome:
        try:
            private_dir(self.attempt_dir)
        except OSError as err:
            raise TpuctlError(f"cannot create log folder {self.attempt_dir}: {err.strerror or err}", hint="pass a --log-dir that tpuctl can write") from None
        # Handlers first: a Ctrl-C right after the job exists must cancel it, not leave it billing.
        with signals.handled(signals.raise_stopped):
            try:
                created = self.jobs.create(body)
            except signals.Stopped:
                raise TpuctlError(
                    "interrupted while submitting the job; it may exist",
                    hint=f"gcloud ai custom-jobs list --region {self.region} --filter=displayName={body.get('displayName')}",
                    exit_code=EXIT_INTERRUPTED,
                ) from None
            self.name = str(created["name"])
            try:
                self.context.notice(f"submitted CustomJob {job_id(self.name)} ({body.get('displayName')}) in {self.region}")
                self.context.notice(f"console: {console_url(self.name, self.jobs.parent.split('/')[1], self.region)}")
                if detach:
                    return self._outcome(0, ended_as="detached")
                self.logs_of_job = self.new_logs(self.name)
                return self._follow(created, self.logs_of_job)
            except signals.Stopped as stopped:
                return self._cancel(stopped.signum)

    def _follow(self, job: dict[str, Any], logs_of_job: JobLogs) -> Outcome:
        while True:
            self._see(job)
            self._show(logs_of_job)
            state = str(job.get("state", ""))
            if state in TERMINAL:
                self._drain(logs_of_job)
                return self._finish(job, state)
            time.sleep(self.poll_s)
            job = self.jobs.get(self.name)

    def _drain(self, logs_of_job: JobLogs) -> None:
        """Entries trail the job's end (Logging ingests them late): poll until two polls bring nothing, or DRAIN_S."""
        deadline, quiet = time.monotonic() + DRAIN_S, 0
        while quiet < 2 and time.monotonic() < deadline:
            quiet = quiet + 1 if not self._show(logs_of_job) else 0
            if quiet < 2:
                time.sleep(self.poll_s)

    def _see(self, job: dict[str, Any]) -> None:
        state = str(job.get("state", "")) or "JOB_STATE_UNSPECIFIED"
        if state != self.state:
            self.state = state
            self.context.notice(f"CustomJob {job_id(self.name)}: {state.removeprefix('JOB_STATE_')} after {time.monotonic() - self.started:.0f}s")

    def _show(self, logs_of_job: JobLogs) -> int:
        """Print the job's new log lines; how many came."""
        try:
            lines = logs_of_job.new_lines()
        except TpuctlError as err:  # logs are a view: a refused or failing Logging call must not end the run
            if str(err) not in self.log_warnings:
                self.log_warnings.add(str(err))
                self.context.notice(f"warning: cannot read the job's logs: {err}")
            return 0
        by_task: dict[str, list[LogLine]] = {}
        for line in lines:
            by_task.setdefault(line.task, []).append(line)
        for task, entries in by_task.items():
            name = worker_name(task)
            position = self.positions.setdefault(name, len(self.positions))
            text = "".join(part + "\n" for entry in entries for part in entry.text.rstrip("\n").split("\n"))
            logs.pump(
                io.BytesIO(text.encode("utf-8", "replace")),
                logs.tag(name, position, self.context.colour),
                self.context.writer,
                self._log_path(name),
                self.tails.setdefault(name, logs.new_tail()),
                append=True,
                hide=self.fold.hides,
            )
        return len(lines)

    def _log_path(self, name: str) -> Path:
        return self.attempt_dir / f"{name.replace(':', '-')}.log"

    # -- endings -------------------------------------------------------------------------------

    def _finish(self, job: dict[str, Any], state: str) -> Outcome:
        code = TERMINAL[state]
        error = job.get("error") if isinstance(job.get("error"), dict) else {}
        message = one_line(str(error.get("message", "")), 400) if error else ""
        if code == 0:
            return self._outcome(0)
        if state == "JOB_STATE_CANCELLED":
            return self._interrupted("cancelled outside this launch")
        # A failed job exits 1 (FAILED, EXPIRED, PARTIALLY_SUCCEEDED alike); the replica Vertex names, with its own
        # status and last lines, is the failure shown.
        return self._outcome(code, failure=self._failure(message, state), message=message or state)

    def _failure(self, message: str, state: str) -> Failure | None:
        """The replica Vertex names in its error message, with its status and last lines; None where it names none."""
        found = _REPLICA_EXIT.search(message)
        if found is None:
            return None
        name, status = worker_name(found[1]), int(found[2])
        tail = list(self.tails.get(name, ()))
        return Failure(
            worker=name,
            host=found[1],
            status=f"exit status {status} ({state.removeprefix('JOB_STATE_')})",
            exit_code=status or FAILED,
            runtime_s=None,
            tail=tail,
            log=self._log_path(name),
            cause=classify(status, tail),
        )

    def _cancel(self, signum: int) -> Outcome:
        """Ask Vertex to cancel, and wait a little for it to say so; a second Ctrl-C stops the waiting, never the cancel."""
        self.context.notice(f"received {signal.Signals(signum).name}; cancelling CustomJob {job_id(self.name)}")
        started = time.monotonic()
        left = f"left running: cancel it with gcloud ai custom-jobs cancel {job_id(self.name)} --region {self.region}"
        with signals.handled(signals.raise_stopped):
            try:
                self.jobs.cancel(self.name)
                while time.monotonic() - started < CANCEL_WAIT_S:
                    job = self.jobs.get(self.name)
                    self._see(job)
                    state = str(job.get("state", ""))
                    if state in TERMINAL:
                        if self.logs_of_job is not None:
                            self._show(self.logs_of_job)
                        if state != "JOB_STATE_CANCELLED":  # it ended by itself first: that is its outcome
                            return self._finish(job, state)
                        break
                    time.sleep(self.poll_s)
            except signals.Stopped:
                pass  # a second Ctrl-C: stop waiting; the cancel was asked for if the call got through
            except TpuctlError as err:
                self.context.notice(f"could not cancel CustomJob {job_id(self.name)}: {err}")
                return self._interrupted(left)
        waited = time.monotonic() - started
        if self.state == "JOB_STATE_CANCELLED":
            return self._interrupted("cancelled")
        return self._interrupted(f"asked to cancel (still {self.state.removeprefix('JOB_STATE_')} after {waited:.0f}s)")

    def _interrupted(self, ended_as: str) -> Outcome:
        outcome = self._outcome(EXIT_INTERRUPTED, message=self.state, ended_as=ended_as)
        outcome.interrupted = True
        return outcome

    def _outcome(self, code: int, failure: Failure | None = None, message: str = "", ended_as: str = "") -> Outcome:
        return Outcome(
            exit_code=code,
            attempts=1,
            elapsed_s=time.monotonic() - self.started,
            failure=failure,
            job=JobRef(
                kind="CustomJob",
                name=job_id(self.name),
                namespace=self.region,
                delete_command=f"gcloud ai custom-jobs cancel {job_id(self.name)} --region {self.region}",
                message=message,
                ended_as=ended_as,
                note=f"gcloud ai custom-jobs describe {job_id(self.name)} --region {self.region}",
                unit="replica",
            ),
        )
