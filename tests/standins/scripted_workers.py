"""Workers and commands that play a script instead of running: a Supervisor's backend whose workers are threads
(lines, "ready", an exit status, signals), and the commands a babysit loop starts. No process starts, so every rule
of the engines above them is checked in milliseconds."""

from __future__ import annotations

import queue
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tpuctl.cloud.nodes.babysit import Command
from tpuctl.cluster.tf_config import Task
from tpuctl.launch.console import logs
from tpuctl.launch.console.tf_noise import Fold
from tpuctl.launch.job import Job
from tpuctl.launch.outcome import Outcome
from tpuctl.launch.process.plan import WorkerSpec
from tpuctl.launch.process.starter import Handle, Starter
from tpuctl.launch.process.supervisor import Supervisor
from tpuctl.runs.timeline import Timeline


@dataclass
class Script:
    """What one fake worker does, attempt after attempt (the last entry repeats)."""

    lines: list[str] = field(default_factory=list)
    ready: bool = True
    exit: int | None = 0  # None: runs until signalled
    delay: float = 0.0  # seconds before it exits
    ignores_sigint: bool = False
    on_sigint: list[str] = field(default_factory=list)  # printed as it stops (Python's KeyboardInterrupt traceback)
    late_lines: list[str] = field(default_factory=list)  # printed after `delay`, just before it exits
    messages: list[str] = field(default_factory=list)  # sent on its control channel after "ready" (`timeline {json}`)


class _Stream:
    def __init__(self) -> None:
        self.chunks: queue.SimpleQueue[bytes] = queue.SimpleQueue()

    def readline(self) -> bytes:
        return self.chunks.get()


class FakeHandle(Handle):
    def __init__(self, spec: WorkerSpec, script: Script) -> None:
        self.spec = spec
        self.script = script
        self.output = _Stream()
        self._messages: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._exited = threading.Event()
        self.returncode: int | None = None
        self.signals: list[int] = []
        self.closed = False
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        for line in self.script.lines:
            self.output.chunks.put(line.encode() + b"\n")
        if self.script.ready:
            self._messages.put("ready")
        for message in self.script.messages:
            self._messages.put(message)
        if self.script.exit is not None and not self._exited.wait(self.script.delay):
            for line in self.script.late_lines:
                self.output.chunks.put(line.encode() + b"\n")
            self._end(self.script.exit)

    def _end(self, returncode: int) -> None:
        if self._exited.is_set():
            return
        self.returncode = returncode
        self.output.chunks.put(b"")
        self._messages.put(None)
        self._exited.set()

    def messages(self) -> Iterator[str]:
        while (message := self._messages.get()) is not None:
            yield message

    def wait(self) -> int:
        self._exited.wait()
        assert self.returncode is not None
        return self.returncode

    def signal(self, sig: int) -> None:
        if sig == signal.SIGCONT:
            return  # a process that is not stopped goes on as it was
        self.signals.append(sig)
        if sig == signal.SIGINT and not self._exited.is_set():
            for line in self.script.on_sigint:
                self.output.chunks.put(line.encode() + b"\n")
        if sig == signal.SIGKILL or not self.script.ignores_sigint:
            self._end(-sig)

    def close(self) -> None:
        self.closed = True


class FakeStarter(Starter):
    name = "fake"
    host = "fakehost"

    def __init__(self, scripts: dict[str, list[Script]]) -> None:
        self.scripts = scripts
        self.handles: list[FakeHandle] = []
        self.released = 0

    def reserve(self, count: int) -> list[str]:
        return [f"fakehost:{1000 + i}" for i in range(count)]

    def start(self, spec: WorkerSpec) -> FakeHandle:
        attempt = int(spec.env["TPUCTL_ATTEMPT"])
        plays = self.scripts.get(spec.name, [Script()])
        handle = FakeHandle(spec, plays[min(attempt, len(plays)) - 1])
        self.handles.append(handle)
        return handle

    def started(self) -> None:
        pass

    def release(self) -> None:
        self.released += 1


def supervise(
    tmp_path: Path, job: Job, scripts: dict[str, list[Script]], fold: Fold | None = None, timeline: Timeline | None = None
) -> tuple[Outcome, FakeStarter, list[str], list[str]]:
    starter = FakeStarter(scripts)
    printed: list[str] = []
    notices: list[str] = []

    class Collect:
        def write(self, text: str) -> None:
            printed.extend(text.splitlines())

        def flush(self) -> None:
            pass

        def isatty(self) -> bool:
            return False

    writer = logs.LineWriter(Collect())  # type: ignore[arg-type]
    supervisor = Supervisor(starter, writer=writer, notice=notices.append, log_dir=tmp_path, colour=False, fold=fold, timeline=timeline)
    return supervisor.run(job, "run-1"), starter, printed, notices


class BareHandle(Handle):
    """A worker that says nothing and has ended well: for a test of what a handle's owner does, not the handle."""

    def __init__(self) -> None:
        self.spec = WorkerSpec(task=Task("worker", 0), chief=True, host="h", address=None, argv=("python",))

    def messages(self) -> Iterator[str]:
        yield from ()

    def wait(self) -> int:
        return 0

    def signal(self, sig: int) -> None:
        pass

    def close(self) -> None:
        pass


# --- babysit's commands --------------------------------------------------------------------------------


class FakeCommand(Command):
    """A command that runs for `polls` checks, then exits with `code` (None: runs until stopped)."""

    def __init__(self, code: int | None, polls: int = 0) -> None:
        self.code, self.polls, self.stopped = code, polls, False

    def poll(self) -> int | None:
        if self.stopped or self.code is None:
            return None
        self.polls -= 1
        return self.code if self.polls < 0 else None

    def stop(self) -> None:
        self.stopped = True


class Runs:
    """Starts the scripted commands in order and keeps them, so a test can see which were stopped."""

    def __init__(self, *commands: FakeCommand) -> None:
        self.waiting, self.started = list(commands), []

    def __call__(self, argv: tuple[str, ...]) -> Command:
        command = self.waiting.pop(0)
        self.started.append(command)
        return command
