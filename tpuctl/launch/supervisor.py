"""Runs a Job's plan on a backend: logs, fail-fast, start-up deadline, restarts.

Shared by every backend. It knows nothing about SSH or Kubernetes; a backend
knows nothing about restarts.
"""

from __future__ import annotations

import json
import queue
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Protocol

from tpuctl.errors import TpuctlError
from tpuctl.launch import logs, signals
from tpuctl.launch.outcome import EXIT_INTERRUPTED, Failure, Outcome, describe_returncode
from tpuctl.launch.plan import Job, Plan, WorkerSpec, build_plan
from tpuctl.launch.private_files import private_dir, write_private

STOP_GRACE_S = 3.0
REAP_S = 2.0  # for the workers' reapers to kill what is left once their channels close
EXIT_START_TIMEOUT = 1


class Handle(Protocol):
    spec: WorkerSpec

    @property
    def output(self) -> logs.LineSource: ...
    def messages(self) -> Iterator[str]: ...
    def wait(self) -> int: ...
    def signal(self, sig: int) -> None: ...
    def close(self) -> None: ...


class Backend(Protocol):
    """Starts workers somewhere. Optional extras a backend may have:

    `placement(count) -> list[str]`, called after reserve(): the host of each
    task when they differ (ssh); otherwise every worker runs on `host`.
    `remote = True`: tag output lines and log file names with each worker's host.
    A Handle may have `describe_exit(returncode) -> str | None` to word its
    failure better than an exit status does (e.g. a lost connection).
    """

    name: str
    host: str

    def reserve(self, count: int) -> list[str]: ...
    def start(self, spec: WorkerSpec) -> Handle: ...
    def started(self) -> None: ...
    def release(self) -> None: ...


@dataclass
class _Attempt:
    plan: Plan
    handles: list[Handle]
    started_at: float
    log_dir: Path
    tails: list[deque[str]] = field(default_factory=list)
    ready: set[int] = field(default_factory=set)
    exited: dict[int, tuple[int, float]] = field(default_factory=dict)


class Supervisor:
    def __init__(
        self,
        backend: Backend,
        *,
        writer: logs.LineWriter,
        notice: Callable[[str], None],
        log_dir: Path,
        colour: bool,
    ) -> None:
        self.backend = backend
        self.writer = writer
        self.notice = notice
        self.log_dir = log_dir
        self.colour = colour
        # (kind, attempt, worker position or signal number, value); attempt 0 is a signal.
        self._events: queue.SimpleQueue[tuple[str, int, int, object]] = queue.SimpleQueue()
        self._signals = 0
        self.notes: list[str] = []  # what went wrong beside the workers (a log that could not be written)

    def run(self, job: Job, run_id: str) -> Outcome:
        started = time.monotonic()
        with signals.handled(self._on_signal):
            outcome = Outcome(exit_code=0, attempts=0, elapsed_s=0.0)
            for attempt in range(1, job.attempts + 1):
                outcome = self._run_attempt(job, run_id, attempt)
                outcome.attempts = attempt
                if self._signals and not outcome.interrupted:
                    outcome = Outcome(EXIT_INTERRUPTED, attempt, 0.0, outcome.failure, interrupted=True)
                if outcome.exit_code == 0 or outcome.interrupted or attempt == job.attempts:
                    break
                assert outcome.failure is not None
                self.notice(
                    f"{outcome.failure.worker} failed ({outcome.failure.status}); "
                    f"restarting all workers (attempt {attempt + 1}/{job.attempts})"
                )
        outcome.elapsed_s = time.monotonic() - started
        outcome.notes.extend(self.notes)
        return outcome

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals += 1
        self._events.put(("signal", 0, signum, self._signals))

    def _run_attempt(self, job: Job, run_id: str, attempt: int) -> Outcome:
        attempt_dir = self._attempt_dir(attempt)
        addresses = self.backend.reserve(job.processes)
        placement = getattr(self.backend, "placement", None)
        hosts = placement(job.processes) if placement is not None else None
        plan = build_plan(job, addresses, run_id=run_id, attempt=attempt, host=self.backend.host, hosts=hosts)
        try:
            write_private(attempt_dir / "plan.json", json.dumps(plan.to_json(), indent=2) + "\n")
        except OSError as err:  # a full disk loses the record, not the run (docs/launch.md, Failure behaviour)
            self._log_warning(f"warning: cannot write {attempt_dir / 'plan.json'}: {err.strerror or err}")
        run = _Attempt(plan=plan, handles=[], started_at=time.monotonic(), log_dir=attempt_dir)
        try:
            for spec in plan.workers:
                run.handles.append(self.backend.start(spec))
            self.backend.started()
            self._watch(run)
            return self._supervise(run, job.start_timeout)
        finally:
            self._stop(run)
            self.backend.release()

    def _attempt_dir(self, attempt: int) -> Path:
        """The attempt's log folder, made before any port or process is taken, so a failure leaves nothing behind.

        Something other than a folder in its place (a file named `attempt-1` in --log-dir)
        is bad input: one line, exit 2.
        """
        attempt_dir = self.log_dir / f"attempt-{attempt}"
        try:
            private_dir(attempt_dir)  # plan.json and the logs may hold --env values
        except OSError as err:
            raise TpuctlError(
                f"cannot create log folder {attempt_dir}: {err.strerror or err}", hint="pass a --log-dir that tpuctl can write"
            ) from None
        return attempt_dir

    def _log_warning(self, message: str) -> None:
        """A log that cannot be written: said once on stderr, and kept in the outcome's notes."""
        self.notes.append(message)
        self.notice(message)

    def _watch(self, run: _Attempt) -> None:
        for position, handle in enumerate(run.handles):
            tail = logs.new_tail()
            run.tails.append(tail)
            prefix = logs.tag(handle.spec.name, position, self.colour, host=self._host_tag(handle.spec))
            log_path = self._log_path(run, handle.spec)
            pump = threading.Thread(
                target=logs.pump,
                args=(handle.output, prefix, self.writer, log_path, tail),
                kwargs={"warn": self._log_warning},
                daemon=True,
            )
            pump.start()
            attempt = run.plan.attempt
            threading.Thread(target=self._read_messages, args=(attempt, position, handle), daemon=True).start()
            threading.Thread(target=self._wait_exit, args=(attempt, position, handle, pump), daemon=True).start()

    def _host_tag(self, spec: WorkerSpec) -> str | None:
        return spec.host if getattr(self.backend, "remote", False) else None

    def _log_path(self, run: _Attempt, spec: WorkerSpec) -> Path:
        host = self._host_tag(spec)
        suffix = f"@{host}" if host else ""
        return run.log_dir / f"{spec.task.type}-{spec.task.index}{suffix}.log"

    def _read_messages(self, attempt: int, position: int, handle: Handle) -> None:
        for message in handle.messages():
            if message == "ready":
                self._events.put(("ready", attempt, position, None))

    def _wait_exit(self, attempt: int, position: int, handle: Handle, pump: threading.Thread) -> None:
        returncode = handle.wait()
        # Let the last lines reach the log before anyone reads the tail; a
        # grandchild still holding the pipe must not delay the verdict.
        pump.join(timeout=2.0)
        self._events.put(("exit", attempt, position, returncode))

    def _supervise(self, run: _Attempt, start_timeout: float) -> Outcome:
        count = len(run.handles)
        deadline = run.started_at + start_timeout
        finite = [p for p, handle in enumerate(run.handles) if not handle.spec.server]
        # Servers (parameter-server workers and ps) never end by themselves: done when the rest are.
        while not all(p in run.exited for p in finite):
            waiting = len(run.ready | set(run.exited)) < count
            try:
                kind, attempt, position, value = self._events.get(
                    timeout=max(0.0, deadline - time.monotonic()) if waiting else None
                )
            except queue.Empty:
                return self._start_timeout(run, start_timeout)
            if attempt not in (0, run.plan.attempt):
                continue  # late news from a previous attempt's workers
            if kind == "signal":
                self.notice(f"received {signal.Signals(position).name}; stopping all workers")
                return Outcome(exit_code=EXIT_INTERRUPTED, attempts=0, elapsed_s=0.0, interrupted=True)
            if kind == "ready":
                run.ready.add(position)
            elif kind == "exit":
                assert isinstance(value, int)
                run.exited[position] = (value, time.monotonic())
                if value != 0:
                    failure = self._failure(run, position, value)
                    return Outcome(exit_code=failure.exit_code, attempts=0, elapsed_s=0.0, failure=failure)
        return Outcome(exit_code=0, attempts=0, elapsed_s=0.0)

    def _failure(self, run: _Attempt, position: int, returncode: int) -> Failure:
        spec = run.handles[position].spec
        status, exit_code = describe_returncode(returncode)
        explain = getattr(run.handles[position], "describe_exit", None)
        if explain is not None:
            status = explain(returncode) or status
        ended = run.exited.get(position, (returncode, time.monotonic()))[1]
        return Failure(
            worker=spec.name,
            host=spec.host,
            status=status,
            exit_code=exit_code,
            runtime_s=ended - run.started_at,
            tail=list(run.tails[position]),
            log=self._log_path(run, spec),
        )

    def _start_timeout(self, run: _Attempt, start_timeout: float) -> Outcome:
        late = [p for p in range(len(run.handles)) if p not in run.ready and p not in run.exited]
        names = ", ".join(run.handles[p].spec.name for p in late)
        failure = self._failure(run, late[0], 0)
        failure.status = f"did not start within {start_timeout:g}s"
        failure.exit_code = EXIT_START_TIMEOUT
        self.notice(f"{names} did not start within {start_timeout:g}s (--start-timeout); stopping all workers")
        return Outcome(exit_code=EXIT_START_TIMEOUT, attempts=0, elapsed_s=0.0, failure=failure)

    def _stop(self, run: _Attempt) -> None:
        """SIGINT every group still running and give it STOP_GRACE_S; then close every control
        channel, on which each worker's reaper kills everything the worker started (its group and
        children that left it) and exits; then SIGKILL every group regardless, for a worker that
        has no reaper (another --python's wrapper, a platform without one)."""
        running = [p for p in range(len(run.handles)) if p not in run.exited]
        for p in running:
            run.handles[p].signal(signal.SIGINT)
        self._await_exits(run, running, STOP_GRACE_S)
        for handle in run.handles:
            handle.close()
        # Before the SIGKILL: a reaper killed by it would leave its worker's detached children behind.
        self._await_exits(run, running, REAP_S)
        for handle in run.handles:
            handle.signal(signal.SIGKILL)

    def _await_exits(self, run: _Attempt, positions: list[int], patience: float) -> None:
        """Wait up to `patience` seconds for these workers to exit; a second Ctrl-C cuts it short."""
        ends = time.monotonic() + patience
        signals_before = self._signals
        while any(p not in run.exited for p in positions) and time.monotonic() < ends:
            if self._signals > signals_before:
                return  # a second Ctrl-C: no more patience
            try:
                kind, attempt, position, value = self._events.get(timeout=max(0.0, ends - time.monotonic()))
            except queue.Empty:
                return
            if kind == "exit" and attempt == run.plan.attempt:
                assert isinstance(value, int)
                run.exited[position] = (value, time.monotonic())
