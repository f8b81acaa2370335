"""One attempt on a process backend: reserve, plan, start every worker, watch them, stop them all.

The mechanics only: this module decides when an attempt is over (the first
failure, the start-up deadline, the hang deadline, a stopping signal, every
finite worker done) and words what ended it, as an Outcome. Whether another
attempt follows, and what it spends, is the Supervisor's policy
(tpuctl/launch/process/supervisor.py).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from tpuctl.cluster.worker_contract import PROFILER_PORT
from tpuctl.endings import INTERRUPTED, Ending, Kind
from tpuctl.inputs.private_files import write_private
from tpuctl.launch import cause
from tpuctl.launch.console import logs
from tpuctl.launch.console.tf_noise import Fold
from tpuctl.launch.job import Job
from tpuctl.launch.outcome import Failure, Outcome
from tpuctl.launch.process import profiles, quiet, stacks
from tpuctl.launch.process.events import Exited, Inbox, Joining, Ready, ReaperNews, StacksRequested, StopSignal, WorkerEvent, WorkerState
from tpuctl.launch.process.joins import JOINED, JOINING, JoinWatch
from tpuctl.launch.process.plan import Plan, WorkerSpec, build_plan
from tpuctl.launch.process.progress import ProgressClock, StepWatch
from tpuctl.launch.process.starter import Handle, Starter
from tpuctl.runs import timeline as tl
from tpuctl.runs.folder import RunFolder
from tpuctl.safety import stack_view
from tpuctl.safety.stack_dump import MESSAGE_LIMIT

STOP_GRACE_S = 3.0
REAP_S = 2.0  # for the workers' reapers to kill what is left once their channels close
EXIT_START_TIMEOUT = 1
EXIT_HANG = 124  # what timeout(1) exits with when its command ran out of time
PREEMPTION_GRACE_S = 20.0  # for the other workers to finish their checkpoint after the first preempted one exits


@dataclass(frozen=True)
class Wiring:
    """What every attempt of one launch works with, set up once by the Supervisor."""

    starter: Starter
    folder: RunFolder
    inbox: Inbox
    collector: stacks.StackCollector
    writer: logs.LineWriter
    notice: Callable[[str], None]
    warn: Callable[[str], None]  # a log that cannot be written: said once, and kept in the outcome's notes
    colour: bool
    fold: Fold | None  # TensorFlow's start-up log lines, kept out of the console (--verbose shows them)
    timeline: tl.Timeline | None = None  # the run's timeline (tpuctl/runs/timeline.py), where the launch keeps one
    profiles: profiles.Desk | None = None  # `tpuctl profile`'s requests, served to the attempt's workers


@dataclass
class _Worker:
    """One worker of the attempt as tpuctl knows it: written by the deciding thread, read by its pump too."""

    handle: Handle
    tail: logs.Tail = field(default_factory=logs.new_tail)
    state: WorkerState = WorkerState.STARTING
    ended_at: float | None = None
    reaper_started: bool = False
    reaper_ended: bool = False
    quieted: bool = False  # lines it printed while tpuctl stopped it went to its log only


def run_attempt(wiring: Wiring, job: Job, run_id: str, number: int) -> Outcome:
    """Attempt `number` from its folder to its last worker stopped; the Supervisor fills in the counts and the time."""
    wiring.folder.make_attempt(number)  # before any port or process is taken: a failure leaves nothing behind
    addresses = wiring.starter.reserve(job.processes)
    hosts = wiring.starter.placement(job.processes)
    log_dir = os.path.abspath(wiring.folder.path)
    starter = wiring.starter
    gpus, tpu_slice = starter.gpus(), starter.jax_finds_hosts
    plan = build_plan(job, addresses, run_id=run_id, attempt=number, host=starter.host, hosts=hosts, log_dir=log_dir, gpus=gpus, jax_finds_hosts=tpu_slice)
    try:
        write_private(wiring.folder.plan_file(number), json.dumps(plan.to_json(), indent=2) + "\n")
    except OSError as err:  # a full disk loses the record, not the run (docs/launch.md, Failure behaviour)
        wiring.warn(f"warning: cannot write {wiring.folder.plan_file(number)}: {err.strerror or err}")
    return _Attempt(wiring, plan).run(job)


class _Attempt:
    def __init__(self, wiring: Wiring, plan: Plan) -> None:
        self.wiring = wiring
        self.plan = plan
        self.number = plan.attempt
        self.workers: list[_Worker] = []
        self.started_at = time.monotonic()
        self.clock = ProgressClock()
        self.worker_steps = False  # a worker's runtime reports steps: the model dir's are not the timeline's
        self.summary_steps = 0  # steps the model dir gave the timeline
        self.joins = JoinWatch(len(plan.workers), plan.job.start_timeout)  # a JAX run's processes meeting in initialize()

    def run(self, job: Job) -> Outcome:
        starter = self.wiring.starter
        self._mark(tl.ATTEMPT_START, workers=len(self.plan.workers))
        outcome: Outcome | None = None
        try:
            for spec in self.plan.workers:
                self.workers.append(_Worker(starter.start(spec)))
                self._mark(tl.WORKER_START, worker=spec.name, host=spec.host)
            starter.started()
            self._record_profilers(job)
            self._watch()
            if self.wiring.profiles is not None:
                self.wiring.profiles.attach(self.number, [w.handle for w in self.workers], lambda p: self.workers[p].state.live)
            steps = StepWatch(job.model_dir, self.clock.touch, self._summary_step, job.hang_timeout, job.quiet_notice) if job.model_dir else None
            if steps is not None:
                steps.start()
            try:
                outcome = self._supervise(job.start_timeout, job.hang_timeout, quiet.QuietSpell(job.quiet_notice))
                return outcome
            finally:
                if steps is not None:
                    steps.stop()
        finally:
            if self.wiring.profiles is not None:
                self.wiring.profiles.detach()
            self._stop()
            starter.release()
            self._ended(outcome)

    def _record_profilers(self, job: Job) -> None:
        """What `tpuctl profile` needs of the attempt's workers: their names and hosts, where they write profiles, how
        the launch reached them; and each one's profiler server's port (PROFILER_PORT in what was started), if any."""
        workers: list[dict[str, object]] = []
        for worker in self.workers:
            spec = worker.handle.spec
            if spec.address is None:
                continue
            entry: dict[str, object] = {"worker": spec.name, "host": spec.address.rsplit(":", 1)[0].strip("[]"), "python": spec.argv[0]}
            port = spec.env.get(PROFILER_PORT)
            if port is not None:
                entry["port"] = int(port)
            if self.wiring.starter.remote:
                entry["ssh"] = spec.host
            workers.append(entry)
        if not workers:
            return
        folder = self.wiring.folder
        try:
            folder.write_profilers(
                self.number, workers, job.model_dir or os.path.abspath(folder.path), self.wiring.starter.name, self.wiring.starter.connection()
            )
        except OSError as err:  # a full disk loses the record (and `tpuctl profile`), not the run
            self.wiring.warn(f"warning: cannot write {folder.profilers_file(self.number)}: {err.strerror or err}")

    # the timeline ---------------------------------------------------------------------------------

    def _mark(self, name: str, *, worker: str | None = None, **fields: object) -> None:
        if self.wiring.timeline is not None:
            self.wiring.timeline.event(name, attempt=self.number, worker=worker, **fields)

    def _summary_step(self, step: int) -> None:
        """A new summary step in the model dir: the timeline's step where no runtime reports its own."""
        if self.worker_steps:
            return
        if not self.summary_steps:
            self._mark(tl.FIRST_STEP, step=step, source="summary")
        self.summary_steps += 1
        self._mark(tl.STEP, step=step, source="summary")

    def _from_worker(self, position: int, message: str) -> None:
        """A worker's `timeline {json}` line: to the timeline; its steps make the model dir's summaries not the timeline's."""
        if not self.worker_steps:
            said = tl.worker_event(message)
            self.worker_steps = said is not None and said.get("event") in (tl.FIRST_STEP, tl.STEP)
        if self.wiring.timeline is not None:
            self.wiring.timeline.from_worker(message, attempt=self.number, worker=self.workers[position].handle.spec.name)

    def _ended(self, outcome: Outcome | None) -> None:
        if self.wiring.timeline is None:
            return
        self.wiring.timeline.flush_steps(self.number)
        ending = Ending(Kind.ERROR, None) if outcome is None else outcome.ending
        self._mark(tl.ATTEMPT_END, **ending.to_json())

    # watching: three threads per worker, whose news reach the deciding thread as events ----------

    def _watch(self) -> None:
        for position, worker in enumerate(self.workers):
            spec = worker.handle.spec
            prefix = logs.tag(spec.name, position, self.wiring.colour, host=self._host_tag(spec))
            pump = threading.Thread(
                target=logs.pump,
                args=(worker.handle.output, prefix, self.wiring.writer, self._log_path(spec), worker.tail),
                kwargs={"warn": self.wiring.warn, "hide": self._line_filter(position)},
                daemon=True,
            )
            pump.start()
            reader = threading.Thread(target=self._read_messages, args=(position, worker.handle), daemon=True)
            reader.start()
            threading.Thread(target=self._wait_exit, args=(position, worker.handle, pump, reader), daemon=True).start()

    def _line_filter(self, position: int) -> Callable[[str], bool]:
        """Every line a worker prints passes here: it is progress (--hang-timeout), TensorFlow's
        start-up chatter stays out of the console (tpuctl/launch/console/tf_noise.py), and so does what a
        worker prints once tpuctl is stopping it (its KeyboardInterrupt traceback from tpuctl's
        SIGINT): the cause is elsewhere, and its log keeps every line."""
        fold = self.wiring.fold
        worker, leader = self.workers[position], self.workers[0]

        def hide(line: str) -> bool:
            self.clock.touch()
            if worker.state is WorkerState.STOPPING:
                worker.quieted = True
                return True
            if fold is not None and position != 0 and leader.state is WorkerState.SUCCEEDED and fold.hides_after_leader(line):
                return True  # the first task (TF's coordination service) ended well; the others lose it as they end
            return fold is not None and fold.hides(line)

        return hide

    def _host_tag(self, spec: WorkerSpec) -> str | None:
        return spec.host if self.wiring.starter.remote else None

    def _log_path(self, spec: WorkerSpec) -> Path:
        return self.wiring.folder.worker_log(self.number, spec.name, self._host_tag(spec))

    def _read_messages(self, position: int, handle: Handle) -> None:
        dropped = False
        for message in handle.messages():
            if message is None:  # a line longer than any message: said once a worker, the rest dropped quietly
                if not dropped:
                    self.wiring.notice(f"warning: {handle.spec.name} sent a control line longer than {MESSAGE_LIMIT} bytes; dropped it (and any more)")
                dropped = True
            elif message == "ready":
                self.wiring.inbox.put(Ready(self.number, position))
            elif message.startswith(tl.MESSAGE_PREFIX):
                self._from_worker(position, message)
            elif message in (JOINING, JOINED):
                self.wiring.inbox.put(Joining(self.number, position, joined=message == JOINED))
            elif message in ("reaper", "ended"):  # the worker's reaper started, and ended as it should
                self.wiring.inbox.put(ReaperNews(self.number, position, ended=message == "ended"))
            elif self.wiring.profiles is None or not self.wiring.profiles.offer(self.number, position, message):
                self.wiring.collector.offer(position, message)

    def _wait_exit(self, position: int, handle: Handle, pump: threading.Thread, reader: threading.Thread) -> None:
        returncode = handle.wait()
        # Let the last lines reach the log before anyone reads the tail; a
        # grandchild still holding the pipe must not delay the verdict.
        pump.join(timeout=2.0)
        reader.join(timeout=1.0)  # the reaper's last word, "ended", tells its own death from the worker's
        self.wiring.inbox.put(Exited(self.number, position, returncode))

    def _take(self, event: WorkerEvent) -> None:
        """Bring a worker's record up to date with news of it."""
        worker = self.workers[event.position]
        if isinstance(event, Ready):
            if worker.state is WorkerState.STARTING:
                self._mark(tl.RUNTIME_READY, worker=worker.handle.spec.name)
            worker.state = worker.state.on_ready()
        elif isinstance(event, Joining):
            self.joins.take(event)
        elif isinstance(event, ReaperNews):
            if event.ended:
                worker.reaper_ended = True
            else:
                worker.reaper_started = True
        elif isinstance(event, Exited):
            worker.state = worker.state.on_exit(event.returncode)
            worker.ended_at = time.monotonic()
            if self.wiring.profiles is not None:
                self.wiring.profiles.changed()  # a capture waiting for this worker's answer stops waiting

    # deciding -------------------------------------------------------------------------------------

    def _starting(self) -> list[int]:
        return [p for p, worker in enumerate(self.workers) if worker.state is WorkerState.STARTING]

    def _live(self) -> list[int]:
        return [p for p, worker in enumerate(self.workers) if worker.state.live]

    def _supervise(self, start_timeout: float, hang_timeout: float | None, spell: quiet.QuietSpell) -> Outcome:
        deadline = self.started_at + start_timeout
        # Servers (parameter-server workers and ps) never end by themselves: done when the rest are.
        finite = [worker for worker in self.workers if not worker.handle.spec.server]
        while any(worker.state.live for worker in finite):
            waiting = bool(self._starting())
            event = self.wiring.inbox.next(self._patience(waiting, deadline, hang_timeout, spell))
            if event is None:
                if late := self.joins.late(time.monotonic()):
                    return self._never_joined(late)
                if waiting:
                    return self._start_timeout(start_timeout)
                if hang_timeout is not None and time.monotonic() - self.clock.last >= hang_timeout:
                    return self._hang(hang_timeout)
                self._quiet_notice(spell)
                continue
            if isinstance(event, WorkerEvent):
                if event.attempt != self.number:
                    continue  # late news from a previous attempt's workers
                self._take(event)
            if isinstance(event, StopSignal):
                asked = "tpuctl stop" if self.wiring.folder.stop_request.exists() else signal.Signals(event.signum).name
                self.wiring.notice(f"received {asked}; stopping all workers")
                return Outcome(exit_code=INTERRUPTED, attempts=0, elapsed_s=0.0, interrupted=True)
            if isinstance(event, StacksRequested):
                self._show_stacks("on request (SIGQUIT)")
            elif isinstance(event, Ready):
                if not self._starting():
                    self.clock.touch()  # the hang clock starts once every worker has started: until then --start-timeout rules
            elif isinstance(event, Exited) and self.workers[event.position].state is WorkerState.FAILED:
                failure = self._failure(event.position, event.returncode)
                self._mark(tl.PREEMPTED if preempted(failure) else tl.FAILURE, worker=failure.worker, status=failure.status)
                if preempted(failure):
                    # TensorFlow has every worker save, then exit by itself: a stop now could cut a slower one's checkpoint.
                    self._await_exits(self._live(), PREEMPTION_GRACE_S)
                return Outcome(exit_code=failure.exit_code, attempts=0, elapsed_s=0.0, failure=failure)
        return Outcome(exit_code=0, attempts=0, elapsed_s=0.0)

    def _patience(self, waiting: bool, deadline: float, hang_timeout: float | None, spell: quiet.QuietSpell) -> float | None:
        """How long to wait for the next event: until the start-up deadline, then until the hang deadline or the quiet notice."""
        joins = self.joins.due()
        if waiting:
            return max(0.0, min(deadline, joins or deadline) - time.monotonic())
        due = [t for t in (None if hang_timeout is None else self.clock.last + hang_timeout, self._quiet_due(spell), joins) if t is not None]
        return max(0.0, min(due) - time.monotonic()) if due else None

    def _quiet_due(self, spell: quiet.QuietSpell) -> float | None:
        """When to look at the quiet spell again; None once a step was seen (a worker's or the model dir's)."""
        return None if self.worker_steps or self.summary_steps else spell.wake_at(self.clock.last, time.monotonic())

    def _quiet_notice(self, spell: quiet.QuietSpell) -> None:
        """Quiet since the last touch, before any step: one line with where each worker is (their stacks taken once)."""
        last = self.clock.last
        if self.worker_steps or self.summary_steps or not spell.due(last, time.monotonic()):
            return
        spell.said(last)
        specs = [worker.handle.spec for worker in self.workers]
        dumps = self.wiring.collector.collect([worker.handle for worker in self.workers], set(self._live()))
        own = stack_view.own_code_predicate(stacks.script_dir(specs[0]))
        self.wiring.notice(quiet.notice([spec.name for spec in specs], dumps, own, spell.period, self.plan.run_id))

    def _show_stacks(self, why: str) -> stack_view.Comparison:
        """Every live worker's stacks on the console and in the attempt's log folder; the comparison the view shows."""
        handles = [worker.handle for worker in self.workers]
        self.wiring.notice(f"taking every worker's stacks {why}")
        dumps = self.wiring.collector.collect(handles, set(self._live()))
        view, comparison = stacks.record([h.spec for h in handles], dumps, self.wiring.folder, self.number)
        for line in view:
            self.wiring.notice(line)
        return comparison

    # what ended the attempt -----------------------------------------------------------------------

    def _hang(self, hang_timeout: float) -> Outcome:
        self._mark(tl.HANG, idle_s=round(time.monotonic() - self.clock.last, 3), hang_timeout=hang_timeout)
        self.wiring.notice(f"no worker printed anything and no new step was written for {hang_timeout:g}s (--hang-timeout)")
        comparison = self._show_stacks("before stopping them")
        differing = list(comparison.off)
        names = [worker.handle.spec.name for worker in self.workers]
        live = self._live()
        suspect = names.index(differing[0]) if differing else (live[0] if live else 0)
        stuck = f" ({', '.join(differing)} stuck elsewhere than the rest)" if differing else ""
        ending = Ending(Kind.HANG, EXIT_HANG, f"made no progress for {hang_timeout:g}s{stuck}")
        failure = replace(self._failure(suspect, 0), ending=ending, cause=cause.hang(hang_timeout, comparison))
        return Outcome(exit_code=EXIT_HANG, attempts=0, elapsed_s=0.0, failure=failure)

    def _failure(self, position: int, returncode: int) -> Failure:
        worker = self.workers[position]
        spec = worker.handle.spec
        explained = worker.handle.describe_exit(returncode)
        ended = worker.ended_at if worker.ended_at is not None else time.monotonic()
        tail = tuple(worker.tail)
        reaper_killed = worker.reaper_started and not worker.reaper_ended
        found = cause.Cause(cause.EXIT, explained.words) if explained else cause.classify(returncode, tail, reaper_killed=reaper_killed)
        if found.kind == cause.PEER_LOST:
            # A peer frozen by SIGSTOP (Ctrl-Z, a debugger) prints nothing: its log cannot hold the root cause, its state can.
            frozen = [w.handle.spec.name for p, w in enumerate(self.workers) if p != position and w.state.live and _stopped(w.handle)]
            if frozen:
                found = cause.stopped(frozen)
        return Failure(
            worker=spec.name,
            host=spec.host,
            ending=explained or Ending.of_returncode(returncode),
            runtime_s=ended - self.started_at,
            tail=tail,
            log=self._log_path(spec),
            # The first failure comes before tpuctl stops anyone: a SIGKILL in it was never tpuctl's.
            cause=found,
        )

    def _start_timeout(self, start_timeout: float) -> Outcome:
        late = self._starting()
        names = [self.workers[p].handle.spec.name for p in late]
        ending = Ending(Kind.FAILED, EXIT_START_TIMEOUT, f"did not start within {start_timeout:g}s")
        failure = replace(self._failure(late[0], 0), ending=ending, cause=cause.never_started(names, start_timeout))
        self._mark(tl.FAILURE, worker=failure.worker, status=failure.status)
        self.wiring.notice(f"{', '.join(names)} did not start within {start_timeout:g}s (--start-timeout); stopping all workers")
        return Outcome(exit_code=EXIT_START_TIMEOUT, attempts=0, elapsed_s=0.0, failure=failure)

    def _never_joined(self, late: list[int]) -> Outcome:
        specs = [self.workers[p].handle.spec for p in late]
        names = [f"{spec.name} on {spec.host}" for spec in specs]
        waited = self.joins.wait_s
        ending = Ending(Kind.FAILED, EXIT_START_TIMEOUT, f"did not reach jax.distributed.initialize() within {waited:g}s")
        failure = replace(self._failure(late[0], 0), ending=ending, cause=cause.never_joined(names, waited))
        self._mark(tl.FAILURE, worker=failure.worker, status=failure.status)
        self.wiring.notice(f"{', '.join(names)} did not reach jax.distributed.initialize() within {waited:g}s of the others; stopping all workers")
        return Outcome(exit_code=EXIT_START_TIMEOUT, attempts=0, elapsed_s=0.0, failure=failure)

    # stopping -------------------------------------------------------------------------------------

    def _stop(self) -> None:
        """SIGINT every group still running and give it STOP_GRACE_S; then close every control
        channel, on which each worker's reaper kills everything the worker started (its group and
        children that left it) and exits; then SIGKILL every group regardless, for a worker that
        has no reaper (another --python's wrapper, a platform without one)."""
        running = self._live()
        for p in running:
            self.workers[p].state = self.workers[p].state.on_stop()
        for p in running:
            self.workers[p].handle.signal(signal.SIGINT)
            self.workers[p].handle.signal(signal.SIGCONT)  # a stopped worker acts on SIGINT only once continued
        self._await_exits(running, STOP_GRACE_S)
        for worker in self.workers:
            worker.handle.close()
        # Before the SIGKILL: a reaper killed by it would leave its worker's detached children behind.
        self._await_exits(running, REAP_S)
        for worker in self.workers:
            worker.handle.signal(signal.SIGKILL)
        quieted = [worker.handle.spec.name for worker in self.workers if worker.quieted]
        if quieted:
            self.wiring.notice(f"what {', '.join(quieted)} printed while tpuctl stopped {'it' if len(quieted) == 1 else 'them'} is in the log only")

    def _await_exits(self, positions: list[int], patience: float) -> None:
        """Wait up to `patience` seconds for these workers to exit; a second Ctrl-C cuts it short."""
        ends = time.monotonic() + patience
        inbox = self.wiring.inbox
        signals_before = inbox.signals
        while any(self.workers[p].state.live for p in positions) and time.monotonic() < ends:
            if inbox.signals > signals_before:
                return  # a second Ctrl-C: no more patience
            event = inbox.next(max(0.0, ends - time.monotonic()))
            if event is None:
                return
            if isinstance(event, WorkerEvent) and event.attempt == self.number:
                self._take(event)


def preempted(failure: Failure) -> bool:
    """Exit status 42 (not a death by signal 42, nor a lost ssh connection): the worker was preempted after saving."""
    return failure.ending.kind is Kind.PREEMPTED


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
