"""The process engine's vocabulary: the state each worker of an attempt is in, and the events that move it.

In the spirit of torchelastic's WorkerState, with only the states the Supervisor
acts on: STARTING workers are what --start-timeout waits for, a STOPPING
worker's output is kept out of the console, a SUCCEEDED first task lets the
others' coordination-service noise be folded, and any state past STOPPING is a
worker that is gone. Events are typed values put on one Inbox by the threads
that watch each worker and by the signal handlers, and read by the one thread
that decides.
"""

from __future__ import annotations

import enum
import queue
from dataclasses import dataclass

from tpuctl.endings import Kind


class WorkerState(enum.Enum):
    STARTING = "starting"  # started; has not said "ready" (its strategy is being built)
    READY = "ready"  # said "ready": from here --hang-timeout, not --start-timeout, watches it
    STOPPING = "stopping"  # tpuctl asked it to stop (SIGINT): what it prints now is not news
    SUCCEEDED = Kind.SUCCEEDED.value  # exited 0
    FAILED = Kind.FAILED.value  # exited otherwise, by itself
    STOPPED = Kind.STOPPED.value  # exited otherwise once tpuctl had asked it to stop

    @property
    def live(self) -> bool:
        """Not exited yet (as far as tpuctl has heard)."""
        return self in (WorkerState.STARTING, WorkerState.READY, WorkerState.STOPPING)

    def on_ready(self) -> WorkerState:
        """A "ready" moves only a starting worker: one being stopped stays so, one gone stays gone."""
        return WorkerState.READY if self is WorkerState.STARTING else self

    def on_stop(self) -> WorkerState:
        return WorkerState.STOPPING if self.live else self

    def on_exit(self, returncode: int) -> WorkerState:
        if returncode == 0:
            return WorkerState.SUCCEEDED
        return WorkerState.STOPPED if self is WorkerState.STOPPING else WorkerState.FAILED


@dataclass(frozen=True)
class WorkerEvent:
    """News about one worker of one attempt; an earlier attempt's late news is ignored by the attempt number."""

    attempt: int
    position: int


@dataclass(frozen=True)
class Ready(WorkerEvent):
    """The worker's runtime said "ready" on its control channel: its strategy is built."""


@dataclass(frozen=True)
class Joining(WorkerEvent):
    """A JAX worker's script entered jax.distributed.initialize() (joined=False), or returned from it (joined=True):
    tpuctl/launch/process/joins.py."""

    joined: bool


@dataclass(frozen=True)
class ReaperNews(WorkerEvent):
    """The worker's reaper started (ended=False), or ended as it should (ended=True): a reaper that
    started and never ended was killed, which tells its death from the worker's."""

    ended: bool


@dataclass(frozen=True)
class Exited(WorkerEvent):
    """The worker ended, its last lines already in its log."""

    returncode: int


@dataclass(frozen=True)
class StopSignal:
    """tpuctl received a stopping signal (SIGINT, SIGTERM, SIGHUP): every worker is to be stopped."""

    signum: int


@dataclass(frozen=True)
class StacksRequested:
    """SIGQUIT (Ctrl-\\, `tpuctl stacks`): show every worker's stacks and go on."""


Event = Ready | Joining | ReaperNews | Exited | StopSignal | StacksRequested


class Inbox:
    """The one queue the deciding thread reads. It counts the stopping signals too, so that a wait
    that the first one started can be cut short by a second one (a second Ctrl-C: no more patience)."""

    def __init__(self) -> None:
        self._events: queue.SimpleQueue[Event] = queue.SimpleQueue()
        self.signals = 0

    def put(self, event: Event) -> None:
        self._events.put(event)

    def signalled(self, signum: int) -> None:
        """Called by the signal handler."""
        self.signals += 1
        self._events.put(StopSignal(signum))

    def next(self, timeout: float | None) -> Event | None:
        """The next event, or None once `timeout` seconds passed without one (None: wait for good)."""
        try:
            return self._events.get(timeout=timeout)
        except queue.Empty:
            return None
