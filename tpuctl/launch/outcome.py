"""How a launch ended: the one result every backend returns, and its one JSON form.

A local process group, a worker on an ssh host and a Kubernetes pod end the
same way as far as a user is concerned (who failed, where, with what status,
its last lines), so `--json` prints one schema whatever ran the job.

Values, all three: each step of a launch (an attempt, the restart policy, a
rehearsal's report, the scrubbing of secret values) returns a new one built with
`dataclasses.replace` to the layer that called it, never edits the one it was given.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tpuctl.endings import Ending, Kind
from tpuctl.launch.cause import Cause
from tpuctl.runs.goodput import Report


@dataclass(frozen=True)
class Failure:
    """The first worker that failed: the one whose status the launch exits with."""

    worker: str
    host: str  # a host name, or the pod a Kubernetes worker ran in
    ending: Ending  # how it ended: its kind, the exit status the launch exits with, its words ("killed by SIGKILL")
    runtime_s: float | None  # None where the backend cannot tell (a pod's run)
    tail: tuple[str, ...]  # its last lines, as it printed them
    log: Path | None
    cause: Cause | None = None  # why, classified (tpuctl.launch.cause); None where nobody classified it

    @property
    def status(self) -> str:
        """Its end in words: "exit status 7", "killed by SIGKILL", "did not start within 30s"."""
        return self.ending.words

    @property
    def exit_code(self) -> int:
        return self.ending.exit_code if self.ending.exit_code is not None else 1


@dataclass(frozen=True)
class JobRef:
    """A job a cluster keeps after tpuctl exits (Kubernetes): what it is and how to remove it."""

    kind: str
    name: str
    namespace: str
    delete_command: str
    message: str = ""  # the controller's last word on the job
    deleted: bool = False
    ended_as: str = ""  # how tpuctl left it where that is not deleted / left running: "cancelled"
    unit: str = "pod"  # what runs one worker there: a pod, a Vertex replica
    note: str = ""  # how to look at it later, where it costs nothing to keep (a Vertex job's record)

    @property
    def label(self) -> str:
        """`TFJob x (default)`, `CustomJob 123 (us-central1)`: the job as a run's record names it."""
        return f"{self.kind} {self.name}" + (f" ({self.namespace})" if self.namespace else "")

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "namespace": self.namespace, "message": self.message, "deleted": self.deleted}


@dataclass(frozen=True)
class Outcome:
    exit_code: int
    attempts: int
    elapsed_s: float
    failure: Failure | None = None
    interrupted: bool = False
    job: JobRef | None = None
    preemptions: int = 0  # attempts that ended in a preemption and were restarted
    notes: tuple[str, ...] = ()  # what tpuctl reported beside the workers, already shown (the --tail summary)
    rehearsal: dict[str, Any] | None = None  # --rehearse: the worker's report (tpuctl/launch/rehearsal_report.py)
    goodput: Report | None = None  # where the wall time went, from the run's timeline (tpuctl/runs/goodput.py); None: no timeline

    @property
    def ending(self) -> Ending:
        """How the launch (or one attempt) ended: stopped, succeeded, else as its first failure did (failed if none is known)."""
        if self.interrupted:
            return Ending(Kind.STOPPED, self.exit_code, Kind.STOPPED.word)
        if self.exit_code == 0:
            return Ending(Kind.SUCCEEDED, 0, Kind.SUCCEEDED.word)
        failure = self.failure
        kind = failure.ending.kind if failure is not None and failure.ending.kind is not Kind.SUCCEEDED else Kind.FAILED
        return Ending(kind, self.exit_code, failure.status if failure is not None else Kind.FAILED.word)

    def to_json(self, *, backend: str, run_id: str, log_dir: Path) -> dict[str, Any]:
        """The `launch --json` record, the same keys for every backend (docs/launch.md)."""
        failure = self.failure
        return {
            "backend": backend,
            "run_id": run_id,
            "result": self.ending.result,
            "exit_code": self.exit_code,
            "attempts": self.attempts,
            "preemptions": self.preemptions,
            "elapsed_s": round(self.elapsed_s, 3),
            "interrupted": self.interrupted,
            "log_dir": str(log_dir),
            "failure": None
            if failure is None
            else {
                "worker": failure.worker,
                "host": failure.host,
                "status": failure.status,
                "exit_code": failure.exit_code,
                "runtime_s": None if failure.runtime_s is None else round(failure.runtime_s, 3),
                "tail": list(failure.tail),
                "log": None if failure.log is None else str(failure.log),
                "cause": None if failure.cause is None else {"kind": failure.cause.kind, "summary": failure.cause.summary},
            },
            "job": None if self.job is None else self.job.to_json(),
            "notes": list(self.notes),
            "rehearsal": self.rehearsal,
            "goodput": None if self.goodput is None else {**self.goodput.to_json(), "line": self.goodput.summary_line()},
        }


def tasks(workers: int, ps: int | None = None) -> str:
    """The processes of a launch by role, counted as `launching N worker(s)` counted them: a
    parameter-server run (`ps` not None) has a chief and its ps tasks beside the workers."""
    return f"{workers} worker(s)" if ps is None else f"{workers} worker(s), a chief and {ps} ps"


def summarise(outcome: Outcome, subject: str, log_dir: Path, say: Callable[[str], None], show: Callable[[str], None]) -> None:
    """The end-of-launch lines for a person: `say` prefixes a line with `tpuctl:`, `show` prints it as is.

    `subject`: what ran, as `tasks()` words it (a cluster's job names itself instead)."""
    failure, job = outcome.failure, outcome.job
    subject = f"{job.kind} {job.name}" if job else subject
    after = f", after {outcome.preemptions} preemption(s)" if outcome.preemptions else ""
    rehearsed = None
    if outcome.rehearsal is not None:
        from tpuctl.launch import rehearsal_report

        for line in rehearsal_report.render(outcome.rehearsal):
            say(line)
        rehearsed = rehearsal_report.verdict_line(outcome.rehearsal)
    if outcome.goodput is not None and outcome.goodput.total.goodput is not None:  # a script with no steps: nothing to say
        say(outcome.goodput.summary_line())
    if outcome.interrupted:
        stopped = "all workers stopped" if job is None else f"{subject} {job.ended_as or ('deleted' if job.deleted else 'left running')}"
        say(f"interrupted; {stopped} (exit {outcome.exit_code}); logs: {log_dir}")
        return
    if outcome.exit_code == 0:
        done = f"succeeded after {outcome.elapsed_s:.1f}s" if job else f"finished in {outcome.elapsed_s:.1f}s (attempt {outcome.attempts}{after})"
        say(f"{subject} {done}; logs: {log_dir}")
        return
    if failure is None and rehearsed is not None:
        say(f"{subject} finished in {outcome.elapsed_s:.1f}s, but {rehearsed}; logs: {log_dir}")
        return
    if failure is None:
        say(f"{subject} failed" + (f": {job.message}" if job and job.message else "; no worker's exit status is known"))
    elif job is not None:
        say(f"{subject} failed: {failure.worker} ({job.unit} {failure.host}) {failure.status}{after}")
    else:
        runtime = f" after {failure.runtime_s:.1f}s" if failure.runtime_s is not None else ""
        say(f"{failure.worker} on {failure.host} failed: {failure.status}{runtime} (attempt {outcome.attempts}{after}); all workers stopped")
    if failure is not None and failure.cause is not None:
        say(f"cause: {failure.cause.summary}")
    if failure is not None and failure.tail:
        say(f"last lines of {failure.worker}:")
        for line in failure.tail:
            show(f"    {line}")
    if job is not None:
        kept = f"the job's record: {job.note}" if job.note else f"the job stays until deleted: {job.delete_command}"
        say(f"logs: {log_dir}; {kept}")
    elif failure is not None:
        say(f"full log: {failure.log}")
