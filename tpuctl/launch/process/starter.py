"""What a process backend (local, ssh) gives the Supervisor: a Starter that starts workers where they run (this
machine, ssh hosts), a Handle per started worker. Named for that one job, so that "backend" keeps one meaning: a
package under tpuctl/backends/ that --backend chooses, whose Runner (tpuctl/launch/runner.py) builds its Starter.

Base classes rather than Protocols so that every optional member is declared
once, here, with the default the Supervisor relies on when a backend has
nothing better to say: the engine never probes a backend for what it has.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator

from tpuctl.devices.gpus import Share
from tpuctl.endings import Ending
from tpuctl.launch.console import logs
from tpuctl.launch.outcome import Failure
from tpuctl.launch.process.plan import WorkerSpec


class Handle(ABC):
    """One started worker: its output, its control messages, its exit status, its signals."""

    spec: WorkerSpec
    output: logs.LineSource  # the worker's stdout and stderr, merged
    can_give_stacks = False  # True where request_stacks() gets an answer: the stacks view waits only for those

    @abstractmethod
    def messages(self) -> Iterator[str | None]:
        """Lines the worker's runtime sends on its control channel ("ready", reaper news, stacks), until it ends;
        None for a line longer than any message (safety/stack_dump.py MESSAGE_LIMIT), which was dropped unread."""

    @abstractmethod
    def wait(self) -> int:
        """Block until the worker ends; its exit status as subprocess words it (negative: killed by that signal)."""

    @abstractmethod
    def signal(self, sig: int) -> None:
        """Send `sig` to the worker's whole process group; a worker already gone is no error."""

    @abstractmethod
    def close(self) -> None:
        """Close the control channel: the worker's reaper then kills everything the worker started."""

    def describe_exit(self, returncode: int) -> Ending | None:
        """The end, where the status alone would misname it (ssh: a lost connection), else None."""
        return None

    def request_stacks(self) -> None:
        """Ask for the worker's stacks; they come back among `messages()` as `stacks HEX`. Only where can_give_stacks."""
        return None

    def request_profile(self, session: str, milliseconds: int) -> bool:
        """Ask the worker's reaper for a capture (`tpuctl profile`); its answer comes back among `messages()` as
        `profile {json}`. False where the request could not be sent (a backend without a reaper to ask)."""
        return False

    def process_group(self) -> int | None:
        """The process group on this machine whose stopped state (SIGSTOP, Ctrl-Z) freezes this worker,
        for naming a frozen peer as a failure's cause; None where tpuctl has none to look at."""
        return None


class Starter(ABC):
    """Starts workers where a backend runs them; knows nothing about restarts, deadlines or logs."""

    name: str
    host: str  # every worker's host unless placement() says otherwise
    remote = False  # True: output lines and log file names are tagged with each worker's host
    jax_finds_hosts = False  # a TPU VM slice: JAX reads its hosts from the metadata server; a JAX run's plan writes none

    @abstractmethod
    def reserve(self, count: int) -> list[str]:
        """An address (host:port) held for each of `count` workers, before any of them starts."""

    @abstractmethod
    def start(self, spec: WorkerSpec) -> Handle:
        """Start one worker of the plan."""

    @abstractmethod
    def started(self) -> None:
        """Every worker of the attempt has started: what reserve() held for them can be let go."""

    @abstractmethod
    def release(self) -> None:
        """The attempt is over and its workers stopped: give back what reserve() and start() took."""

    def placement(self, count: int) -> list[str] | None:
        """Called after reserve(): the host of each task where they differ (ssh); None: every worker on `host`."""
        return None

    def gpus(self) -> Share | None:
        """Which GPUs each task sees (local workers: tpuctl/devices/gpus.py); None: the environment is left alone."""
        return None

    def connection(self) -> dict[str, object] | None:
        """How the workers' hosts were reached, kept with the run so that `tpuctl profile` reaches them the same
        way without being told again; None for workers on this machine."""
        return None

    def lost_to_preemption(self, failure: Failure) -> str | None:
        """A failure that was really a preemption (a TPU slice's host went down with its node): the node's condition."""
        return None

    def after_preemption(self, notice: Callable[[str], None]) -> None:
        """After a preempted attempt, before the next reserve(): returns once the hosts can run workers
        again (a TPU slice: its node READY again), or raises TpuctlError."""
        return None
