"""A cluster's job played from a script: a Scheduler whose statuses, log streams and batches are given, and the
run context a job follower writes to. Everything past the Scheduler seam is tpuctl's real job engine."""

from __future__ import annotations

import io
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

from tpuctl.endings import Kind
from tpuctl.inputs.errors import TpuctlError
from tpuctl.launch.console import logs
from tpuctl.launch.follow.scheduler import JobStatus, LogBatch, ReplicaRun, Scheduler
from tpuctl.launch.outcome import JobRef
from tpuctl.launch.runner import RunContext
from tpuctl.runs.folder import RunFolder

RUNNING = JobStatus("RUNNING")
DONE = JobStatus("SUCCEEDED", end=Kind.SUCCEEDED)
NOISE = "I0000 00:00:1763900000.123456    1234 port.cc:153] oneDNN custom operations are on."


class Stream:
    """A replica run's lines; `hold` keeps the last one back until set, as a stream still running would."""

    def __init__(self, data: bytes, why: str | None = None, hold: threading.Event | None = None) -> None:
        self.lines = io.BytesIO(data).readlines()
        self.why = why
        self.hold = hold
        self.stopped = False

    def readline(self) -> bytes:
        if len(self.lines) == 1 and self.hold is not None:
            self.hold.wait(timeout=5)
        return self.lines.pop(0) if self.lines else b""

    def ended(self) -> str | None:
        return self.why

    def stop(self) -> None:
        self.stopped = True


class Script(Scheduler):
    """One job's life: each describe takes the next status, or sends that signal to this process.
    Its lines come both ways a cluster gives them: streams per replica run, and batches polled for."""

    def __init__(
        self,
        statuses: list[JobStatus | signal.Signals],
        batches: list[list[LogBatch] | TpuctlError] | None = None,
        streams: dict[ReplicaRun, Stream] | None = None,
    ) -> None:
        self.poll_s = 0.01
        self.workers = ["worker:0", "worker:1"]
        self.statuses: Iterator[JobStatus | signal.Signals] = iter(statuses)
        self.batches = list(batches or [])
        self.streams = streams or {}
        self.described = 0
        self.reads = 0
        self.cancels = 0

    def submit(self) -> None:
        return None

    def describe(self) -> JobStatus:
        self.described += 1
        status = next(self.statuses)
        if isinstance(status, signal.Signals):
            signal.raise_signal(status)  # the engine's handler turns it into signals.Stopped, here
            raise AssertionError("the signal did not stop the poll")
        return status

    def cancel(self) -> None:
        self.cancels += 1

    def job_ref(self) -> JobRef:
        return JobRef(kind="FakeJob", name="j", namespace="ns", delete_command="fake delete j", unit="replica")

    def open_log(self, run: ReplicaRun) -> Stream:
        return self.streams[run]

    def read_logs(self) -> list[LogBatch]:
        self.reads += 1
        batch = self.batches.pop(0) if self.batches else []
        if isinstance(batch, TpuctlError):
            self.batches.insert(0, batch)  # it goes on failing
            raise batch
        return batch

    def logs_settled(self, quiet: int) -> bool:
        return quiet >= 2


class Launch:
    def __init__(self, tmp_path: Path) -> None:
        self.shown = io.StringIO()
        self.notices: list[str] = []
        self.folder = RunFolder(tmp_path / "logs")
        self.context = RunContext("run-1", self.folder.path, logs.LineWriter(self.shown), self.notices.append, colour=False)

    def lines(self) -> list[str]:
        return self.shown.getvalue().splitlines()
