"""Runs a Job's plan on a backend: logs, fail-fast, start-up deadline, restarts.

Shared by every backend. It knows nothing about SSH or Kubernetes; a backend
knows nothing about restarts.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from tpuctl import signals, stack_view
from tpuctl.launch import cause
from tpuctl.launch.console import logs
from tpuctl.launch.console.tf_noise import Fold
from tpuctl.launch.job import Job
from tpuctl.launch.outcome import EXIT_INTERRUPTED, Failure, Outcome, describe_returncode
from tpuctl.launch.process import stacks
from tpuctl.launch.process.backend import Backend, Handle
from tpuctl.launch.process.plan import Plan, WorkerSpec, build_plan
from tpuctl.launch.process.progress import ProgressClock, StepWatch
from tpuctl.private_files import write_private
from tpuctl.runs import registry as run_registry
from tpuctl.runs.folder import RunFolder
from tpuctl.worker_contract import PREEMPTED_EXIT_CODE

STOP_GRACE_S = 3.0
REAP_S = 2.0  # for the workers' reapers to kill what is left once their channels close
EXIT_START_TIMEOUT = 1
EXIT_HANG = 124  # what timeout(1) exits with when its command ran out of time
PREEMPTION_GRACE_S = 20.0  # for the other workers to finish their checkpoint after the first preempted one exits


@dataclass
class _Attempt:
    plan: Plan
    handles: list[Handle]
    started_at: float
    log_dir: Path
    tails: list[deque[str]] = field(default_factory=list)
    ready: set[int] = field(default_factory=set)
    exited: dict[int, tuple[int, float]] = field(default_factory=dict)
    clock: ProgressClock = field(default_factory=ProgressClock)
    stopping: bool = False  # tpuctl is stopping the workers: what they print now (KeyboardInterrupt tracebacks) is not news
    quieted: set[int] = field(default_factory=set)  # workers whose lines went to their logs only meanwhile


class Supervisor:
    def __init__(
        self,
        backend: Backend,
        *,
        writer: logs.LineWriter,
        notice: Callable[[str], None],
        log_dir: Path,
        colour: bool,
        fold: Fold | None = None,
    ) -> None:
        self.backend = backend
        self.writer = writer
        self.notice = notice
        self.log_dir = log_dir
        self.folder = RunFolder(log_dir)
        self.colour = colour
        self.fold = fold  # TensorFlow's start-up log lines, kept out of the console (--verbose shows them)
        # (kind, attempt, worker position or signal number, value); attempt 0 is a signal.
        self._events: queue.SimpleQueue[tuple[str, int, int, object]] = queue.SimpleQueue()
        self._signals = 0
        self._stacks = stacks.StackCollector()
        self._reaper_news: dict[tuple[int, int], set[str]] = {}  # (attempt, position) -> what its reaper said
        self.notes: list[str] = []  # what went wrong beside the workers (a log that could not be written)

    def run(self, job: Job, run_id: str) -> Outcome:
        """Attempts until one succeeds, is interrupted, or no restart is left: a preemption spends
        one of --max-preemptions, any other failure one of --max-restarts."""
        started = time.monotonic()
        restarts = preemptions = 0
        with signals.handled(self._on_signal), self._stacks_on_request(run_id):
            attempt = 0
            while True:
                attempt += 1
                outcome = self._run_attempt(job, run_id, attempt)
                outcome.attempts, outcome.preemptions = attempt, preemptions
                if self._signals and not outcome.interrupted:
                    outcome = Outcome(EXIT_INTERRUPTED, attempt, 0.0, outcome.failure, interrupted=True, preemptions=preemptions)
                if outcome.exit_code == 0 or outcome.interrupted:
                    break
                failure = outcome.failure
                assert failure is not None
                if _preempted(failure) or self._went_with_its_node(failure):
                    if preemptions == job.max_preemptions:
                        break
                    preemptions += 1
                    self.notice(
                        f"{failure.worker} was preempted ({failure.status}); restarting all workers from the last checkpoint "
                        f"(preemption {preemptions}/{job.max_preemptions}, attempt {attempt + 1})"
                    )
                    self.backend.after_preemption(self.notice)
                    continue
                if restarts == job.max_restarts:
                    break
                restarts += 1
                why = f": {failure.cause.summary}" if failure.cause is not None and failure.cause.kind != cause.EXIT else ""
                self.notice(f"{failure.worker} failed ({failure.status}){why}; restarting all workers (attempt {attempt + 1}/{job.attempts + preemptions})")
        outcome.elapsed_s = time.monotonic() - started
        outcome.notes.extend(self.notes)
        return outcome

    def _went_with_its_node(self, failure: Failure) -> bool:
        """A TPU VM's preemption ends no worker with 42: its hosts go down. The backend tells that from a crash."""
        condition = self.backend.lost_to_preemption(failure)
        if condition:
            self.notice(f"{failure.worker} was lost with its TPU VM, which is {condition} now: a preemption")
        return bool(condition)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals += 1
        self._events.put(("signal", 0, signum, self._signals))

    @contextlib.contextmanager
    def _stacks_on_request(self, run_id: str) -> Iterator[None]:
        """SIGQUIT (Ctrl-\\, `tpuctl stacks`) shows every worker's stacks; the run is registered for `tpuctl stacks` meanwhile."""
        previous = signal.signal(signal.SIGQUIT, lambda signum, frame: self._events.put(("stacks", 0, 0, None)))
        try:
            with run_registry.registered(run_id, self.log_dir):
                yield
        finally:
            signal.signal(signal.SIGQUIT, previous)

    def _run_attempt(self, job: Job, run_id: str, attempt: int) -> Outcome:
        attempt_dir = self.folder.make_attempt(attempt)  # before any port or process is taken: a failure leaves nothing behind
        addresses = self.backend.reserve(job.processes)
        hosts = self.backend.placement(job.processes)
        plan = build_plan(job, addresses, run_id=run_id, attempt=attempt, host=self.backend.host, hosts=hosts)
        try:
            write_private(self.folder.plan_file(attempt), json.dumps(plan.to_json(), indent=2) + "\n")
        except OSError as err:  # a full disk loses the record, not the run (docs/launch.md, Failure behaviour)
            self._log_warning(f"warning: cannot write {self.folder.plan_file(attempt)}: {err.strerror or err}")
        run = _Attempt(plan=plan, handles=[], started_at=time.monotonic(), log_dir=attempt_dir)
        try:
            for spec in plan.workers:
                run.handles.append(self.backend.start(spec))
            self.backend.started()
            self._watch(run)
            steps = StepWatch(job.model_dir, run.clock, job.hang_timeout) if job.hang_timeout and job.model_dir else None
            if steps is not None:
                steps.start()
            try:
                return self._supervise(run, job.start_timeout, job.hang_timeout)
            finally:
                if steps is not None:
                    steps.stop()
        finally:
            self._stop(run)
            self.backend.release()

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
                kwargs={"warn": self._log_warning, "hide": self._line_filter(run, position)},
                daemon=True,
            )
            pump.start()
            attempt = run.plan.attempt
            reader = threading.Thread(target=self._read_messages, args=(attempt, position, handle), daemon=True)
            reader.start()
            threading.Thread(target=self._wait_exit, args=(attempt, position, handle, pump, reader), daemon=True).start()

    def _line_filter(self, run: _Attempt, position: int) -> Callable[[str], bool]:
        """Every line a worker prints passes here: it is progress (--hang-timeout), TensorFlow's
        start-up chatter stays out of the console (tpuctl/launch/console/tf_noise.py), and so does what a
        worker prints once tpuctl is stopping it (its KeyboardInterrupt traceback from tpuctl's
        SIGINT): the cause is elsewhere, and its log keeps every line."""
        fold = self.fold

        def hide(line: str) -> bool:
            run.clock.touch()
            if run.stopping and position not in run.exited:
                run.quieted.add(position)
                return True
            if fold is not None and position != 0 and run.exited.get(0, (None, 0.0))[0] == 0 and fold.hides_after_leader(line):
                return True  # the first task (TF's coordination service) ended well; the others lose it as they end
            return fold is not None and fold.hides(line)

        return hide

    def _host_tag(self, spec: WorkerSpec) -> str | None:
        return spec.host if self.backend.remote else None

    def _log_path(self, run: _Attempt, spec: WorkerSpec) -> Path:
        return self.folder.worker_log(run.plan.attempt, spec.name, self._host_tag(spec))

    def _read_messages(self, attempt: int, position: int, handle: Handle) -> None:
        for message in handle.messages():
            if message == "ready":
                self._events.put(("ready", attempt, position, None))
            elif message in ("reaper", "ended"):  # the worker's reaper started, and ended as it should
                self._reaper_news.setdefault((attempt, position), set()).add(message)
            else:
                self._stacks.offer(position, message)

    def _wait_exit(self, attempt: int, position: int, handle: Handle, pump: threading.Thread, reader: threading.Thread) -> None:
        returncode = handle.wait()
        # Let the last lines reach the log before anyone reads the tail; a
        # grandchild still holding the pipe must not delay the verdict.
        pump.join(timeout=2.0)
        reader.join(timeout=1.0)  # the reaper's last word, "ended", tells its own death from the worker's
        self._events.put(("exit", attempt, position, returncode))

    def _supervise(self, run: _Attempt, start_timeout: float, hang_timeout: float | None) -> Outcome:
        count = len(run.handles)
        deadline = run.started_at + start_timeout
        finite = [p for p, handle in enumerate(run.handles) if not handle.spec.server]
        # Servers (parameter-server workers and ps) never end by themselves: done when the rest are.
        while not all(p in run.exited for p in finite):
            waiting = len(run.ready | set(run.exited)) < count
            try:
                kind, attempt, position, value = self._events.get(timeout=self._patience(run, waiting, deadline, hang_timeout))
            except queue.Empty:
                if waiting:
                    return self._start_timeout(run, start_timeout)
                assert hang_timeout is not None
                if time.monotonic() - run.clock.last >= hang_timeout:
                    return self._hang(run, hang_timeout)
                continue
            if attempt not in (0, run.plan.attempt):
                continue  # late news from a previous attempt's workers
            if kind == "signal":
                self.notice(f"received {signal.Signals(position).name}; stopping all workers")
                return Outcome(exit_code=EXIT_INTERRUPTED, attempts=0, elapsed_s=0.0, interrupted=True)
            if kind == "stacks":
                self._show_stacks(run, "on request (SIGQUIT)")
            elif kind == "ready":
                run.ready.add(position)
                if len(run.ready | set(run.exited)) == count:
                    run.clock.touch()  # the hang clock starts once every worker has started: until then --start-timeout rules
            elif kind == "exit":
                assert isinstance(value, int)
                run.exited[position] = (value, time.monotonic())
                if value != 0:
                    failure = self._failure(run, position, value)
                    if _preempted(failure):
                        # TensorFlow has every worker save, then exit by itself: a stop now could cut a slower one's checkpoint.
                        self._await_exits(run, [p for p in range(count) if p not in run.exited], PREEMPTION_GRACE_S)
                    return Outcome(exit_code=failure.exit_code, attempts=0, elapsed_s=0.0, failure=failure)
        return Outcome(exit_code=0, attempts=0, elapsed_s=0.0)

    @staticmethod
    def _patience(run: _Attempt, waiting: bool, deadline: float, hang_timeout: float | None) -> float | None:
        """How long to wait for the next event: until the start-up deadline, then until the hang deadline."""
        if waiting:
            return max(0.0, deadline - time.monotonic())
        if hang_timeout is not None:
            return max(0.0, run.clock.last + hang_timeout - time.monotonic())
        return None

    def _show_stacks(self, run: _Attempt, why: str) -> stack_view.Comparison:
        """Every live worker's stacks on the console and in the attempt's log folder; the comparison the view shows."""
        live = {p for p in range(len(run.handles)) if p not in run.exited}
        self.notice(f"taking every worker's stacks {why}")
        dumps = self._stacks.collect(run.handles, live)
        view, comparison = stacks.record([h.spec for h in run.handles], dumps, self.folder, run.plan.attempt)
        for line in view:
            self.notice(line)
        return comparison

    def _hang(self, run: _Attempt, hang_timeout: float) -> Outcome:
        self.notice(f"no worker printed anything and no new step was written for {hang_timeout:g}s (--hang-timeout)")
        comparison = self._show_stacks(run, "before stopping them")
        differing = list(comparison.off)
        names = [h.spec.name for h in run.handles]
        live = [p for p in range(len(run.handles)) if p not in run.exited]
        suspect = names.index(differing[0]) if differing else (live[0] if live else 0)
        failure = self._failure(run, suspect, 0)
        failure.status = f"made no progress for {hang_timeout:g}s" + (f" ({', '.join(differing)} stuck elsewhere than the rest)" if differing else "")
        failure.exit_code = EXIT_HANG
        failure.cause = cause.hang(hang_timeout, comparison)
        return Outcome(exit_code=EXIT_HANG, attempts=0, elapsed_s=0.0, failure=failure)

    def _failure(self, run: _Attempt, position: int, returncode: int) -> Failure:
        spec = run.handles[position].spec
        status, exit_code = describe_returncode(returncode)
        explained = run.handles[position].describe_exit(returncode)
        ended = run.exited.get(position, (returncode, time.monotonic()))[1]
        tail = list(run.tails[position])
        news = self._reaper_news.get((run.plan.attempt, position), set())
        reaper_killed = "reaper" in news and "ended" not in news
        found = cause.Cause(cause.EXIT, explained) if explained else cause.classify(returncode, tail, reaper_killed=reaper_killed)
        if found.kind == cause.PEER_LOST:
            # A peer frozen by SIGSTOP (Ctrl-Z, a debugger) prints nothing: its log cannot hold the root cause, its state can.
            frozen = [h.spec.name for p, h in enumerate(run.handles) if p != position and p not in run.exited and _stopped(h)]
            if frozen:
                found = cause.stopped(frozen)
        return Failure(
            worker=spec.name,
            host=spec.host,
            status=explained or status,
            exit_code=exit_code,
            runtime_s=ended - run.started_at,
            tail=tail,
            log=self._log_path(run, spec),
            # The first failure comes before tpuctl stops anyone: a SIGKILL in it was never tpuctl's.
            cause=found,
        )

    def _start_timeout(self, run: _Attempt, start_timeout: float) -> Outcome:
        late = [p for p in range(len(run.handles)) if p not in run.ready and p not in run.exited]
        names = ", ".join(run.handles[p].spec.name for p in late)
        failure = self._failure(run, late[0], 0)
        failure.status = f"did not start within {start_timeout:g}s"
        failure.exit_code = EXIT_START_TIMEOUT
        failure.cause = cause.never_started([run.handles[p].spec.name for p in late], start_timeout)
        self.notice(f"{names} did not start within {start_timeout:g}s (--start-timeout); stopping all workers")
        return Outcome(exit_code=EXIT_START_TIMEOUT, attempts=0, elapsed_s=0.0, failure=failure)

    def _stop(self, run: _Attempt) -> None:
        """SIGINT every group still running and give it STOP_GRACE_S; then close every control
        channel, on which each worker's reaper kills everything the worker started (its group and
        children that left it) and exits; then SIGKILL every group regardless, for a worker that
        has no reaper (another --python's wrapper, a platform without one)."""
        running = [p for p in range(len(run.handles)) if p not in run.exited]
        run.stopping = True
        for p in running:
            run.handles[p].signal(signal.SIGINT)
            run.handles[p].signal(signal.SIGCONT)  # a stopped worker acts on SIGINT only once continued
        self._await_exits(run, running, STOP_GRACE_S)
        for handle in run.handles:
            handle.close()
        # Before the SIGKILL: a reaper killed by it would leave its worker's detached children behind.
        self._await_exits(run, running, REAP_S)
        for handle in run.handles:
            handle.signal(signal.SIGKILL)
        if run.quieted:
            names = ", ".join(run.handles[p].spec.name for p in sorted(run.quieted))
            self.notice(f"what {names} printed while tpuctl stopped {'it' if len(run.quieted) == 1 else 'them'} is in the log only")

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


def _stopped(handle: Handle) -> bool:
    """A worker with a process in state T (stopped: SIGSTOP, SIGTSTP) in its process group on this
    machine. Where tpuctl has no group to look at, False."""
    group = handle.process_group()
    if group is None:
        return False
    try:
        entries = os.listdir("/proc")
    except OSError:
        return False
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rpartition(b")")[2].split()
        except OSError:
            continue  # gone meanwhile, or not ours to read
        if len(fields) > 2 and fields[0] in (b"T", b"t") and fields[2] == str(group).encode():
            return True
    return False


def _preempted(failure: Failure) -> bool:
    """Exit status 42 (not a death by signal 42, nor an ssh status): the worker was preempted after saving."""
    return failure.exit_code == PREEMPTED_EXIT_CODE and failure.status.startswith("exit status")
