"""What a job backend tells the job engine (tpuctl/launch/follow/engine.py): the seam between them.

The engine knows how a launch follows a job: it polls, says state changes,
tags and saves every replica's lines, drains the last ones, handles Ctrl-C and
maps the end to an Outcome. A Scheduler knows one cluster: how to submit there,
what the job's state is, where its replicas' lines come from, how to cancel it.
That is TorchX's split (its Scheduler: submit, describe, log_iter, cancel); a
third cluster (Slurm, Ray) is one more Scheduler, not one more engine.

Lines reach the engine one of two ways, whichever the cluster offers: a stream
per replica run, followed until it ends (`kubectl logs -f`: `describe` lists
the runs, `open_log` opens one), or batches the engine asks for on every poll
(Cloud Logging's entries: `read_logs`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import ClassVar, Protocol

from tpuctl.endings import Kind
from tpuctl.launch.outcome import JobRef


class OnInterrupt(Enum):
    """What a signal to tpuctl does to the job."""

    LEAVE = "leave"  # the job runs on, and tpuctl says how to delete it; Ctrl-C at a terminal asks first
    CANCEL = "cancel"  # tpuctl cancels it and waits a little to see it end (a second Ctrl-C stops the waiting)


@dataclass(frozen=True)
class Replica:
    """The replica whose failure decides a failed job's summary: who, where, with what status."""

    worker: str  # as TF_CONFIG names it: `worker:1`
    host: str  # where it ran: a pod, a Vertex task
    status: str  # in words: "exited with 7 (OOMKilled)"
    returncode: int  # what its process ended with (the cause is read from it)
    exit_code: int  # what the failure reports as its exit code
    attempt: int = 1  # which attempt's log holds its lines
    oom_reported: bool = False  # the cluster says the OOM killer ended it


@dataclass(frozen=True)
class ReplicaRun:
    """One run of one replica whose lines can be followed now (a pod's container, once started)."""

    worker: str
    attempt: int
    host: str


@dataclass(frozen=True)
class LogBatch:
    """A worker's entries that came since the last poll, in order; an entry may hold several lines."""

    worker: str
    texts: list[str]
    attempt: int = 1


@dataclass(frozen=True)
class JobStatus:
    """The job as one `describe` saw it."""

    state: str = ""  # the cluster's word for the job's state, as it says it; "" where it has none worth a notice
    label: str = ""  # that state in a notice, where it differs from `state` (RUNNING for JOB_STATE_RUNNING)
    end: Kind | None = None  # None while it runs; SUCCEEDED, FAILED, or CANCELLED by someone else (this launch's own Ctrl-C is the engine's)
    exit_code: int = 0  # the launch's exit status, once ended
    message: str = ""  # the cluster's last word on the job (JobRef.message)
    failed: Replica | None = None  # on a failure, the replica it names, where it names one
    running: tuple[ReplicaRun, ...] = ()  # replica runs whose lines can be followed (the engine opens each once)


class LogStream(Protocol):
    """One replica run's lines, as they come, until the run ends or the stream is stopped."""

    def readline(self) -> bytes: ...

    def ended(self) -> str | None:
        """After the last line: None where the stream ended as it should, else the line that says why not."""
        ...

    def stop(self) -> None: ...


class Scheduler(ABC):
    """One cluster's part of following one job. Every optional member is declared here with its default."""

    on_interrupt: ClassVar[OnInterrupt] = OnInterrupt.LEAVE
    drain_s: ClassVar[float] = 10.0  # how long the last lines may take to arrive once the job is over
    poll_s: float  # seconds between two looks at the job
    workers: Sequence[str] = ()  # the workers known before any runs, in order: their colours follow it

    @abstractmethod
    def submit(self) -> JobStatus | None:
        """Create the job; its status where the cluster's reply tells it (saving one describe), else None.
        A signal meanwhile may leave the job created: the engine's interrupt path then runs."""

    @abstractmethod
    def describe(self) -> JobStatus:
        """Look at the job once."""

    @abstractmethod
    def cancel(self) -> None:
        """Ask the cluster to end the job (delete, cancel); it may take a while to end."""

    @abstractmethod
    def job_ref(self) -> JobRef:
        """What the job is and how to remove it, valid once submitted; a new object every call."""

    def attempts(self) -> int:
        """How many attempts the job made so far (a Kubernetes container restart is one)."""
        return 1

    def open_log(self, run: ReplicaRun) -> LogStream:
        """Start following the lines of a run that `describe` listed in `JobStatus.running`."""
        raise NotImplementedError(f"{type(self).__name__} lists no replica runs to follow")

    def read_logs(self) -> list[LogBatch]:
        """The entries that came since the last call; a TpuctlError costs one warning, never the run."""
        return []

    def logs_settled(self, quiet: int) -> bool:
        """After the job's end, with every stream ended (or past the drain's deadline): whether all its lines are in.
        `quiet`: how many polls in a row brought no entry. Streams end with their runs, so by default: yes."""
        return True
