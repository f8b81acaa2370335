"""Keep a (spot) TPU VM alive and a command running on it: the loop behind `tpuctl babysit`.

Spot and preemptible nodes are taken away without notice; the service first
marks them PREEMPTED, later deletes them. The babysitter notices either,
recreates the node from its saved spec and runs the command again — a
`tpuctl launch` with BackupAndRestore then resumes from its last checkpoint.
The command runs on this machine in its own process group under a reaper,
so stopping it stops everything it started, on every way babysitting ends.

A node's condition, and the lighter watch a `tpuctl launch --tpu` keeps after a
preemption, are the node's health (health.py), which this loop reads too.
"""

from __future__ import annotations

import shutil
import signal
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

from tpuctl.cloud.capacity.recovery import Candidates, Lost, Tries, recover
from tpuctl.cloud.nodes import lifecycle
from tpuctl.cloud.nodes.creating import CREATE_DEADLINE_S
from tpuctl.cloud.nodes.health import condition
from tpuctl.cloud.nodes.lifecycle import Progress
from tpuctl.cloud.nodes.nodespec import NodeSpec
from tpuctl.cloud.nodes.tpu import NodeApi
from tpuctl.endings import INTERRUPTED, Kind
from tpuctl.inputs.errors import FAILED, TpuctlError
from tpuctl.safety import reaper, signals
from tpuctl.tpu.capacity import Recovery

STOP_GRACE_S = 10.0
POLL_S = 0.2  # how often the command's exit is checked between looks at the node
DEFAULT_MAX_RECREATES = 10  # babysit's --max-recreates when not given: how often a lost node is recreated before it gives up


class Command:
    """The user's command in its own process group under a reaper (tpuctl/safety/reaper.py), so stopping
    it stops everything it started, also children in sessions of their own, and so that it dies
    with babysit even when babysit is killed with SIGKILL."""

    def __init__(self, argv: tuple[str, ...], grace_s: float = STOP_GRACE_S) -> None:
        self.grace_s = grace_s
        # The reaper reports a command it cannot exec only by status 127: say why here, in one line.
        if shutil.which(argv[0]) is None:
            raise TpuctlError(f"cannot run {argv[0]!r}: No such file or directory, or not executable", exit_code=FAILED)
        try:
            self.reaped = reaper.spawn(argv)
        except OSError as err:
            raise TpuctlError(f"cannot run {argv[0]!r}: {err.strerror}", exit_code=FAILED) from None
        self.process = self.reaped.proc

    def poll(self) -> int | None:
        return self.process.poll()

    def stop(self, grace_s: float | None = None) -> None:
        """SIGINT first (a launch then stops its workers cleanly), then, after the grace period,
        SIGKILL to all it started, wherever they went."""
        self.reaped.stop(self.grace_s if grace_s is None else grace_s)


@dataclass(frozen=True)
class BabysitTerms:
    """How to babysit a TPU node: what to run on it, how often to look at the node, when to give up, how a lost one
    comes back, and where to tell the user."""

    command: tuple[str, ...] = ()
    interval_s: float = 30.0
    max_recreates: int = DEFAULT_MAX_RECREATES  # the one budget of recreations (--max-recreates)
    note: Callable[[str], None] = lambda message: None  # one line for the user (the CLI prefixes "babysit: ")
    status: Callable[[str], AbstractContextManager[Progress]] = lambda title: _quiet()  # a progress line around each wait
    start: Callable[[tuple[str, ...]], Command] = Command
    pause: Callable[[float], None] = time.sleep  # between polls of the API while the node is (re)created
    create_deadline_s: float = CREATE_DEADLINE_S  # one recreate stuck in CREATING past it is a stockout
    candidates: Candidates | None = None  # where else the node may go (None: its zone only)
    recovery: Recovery | None = None  # its own zone first, or elsewhere first (None: the default for its kind)


def _quiet() -> AbstractContextManager[Progress]:
    return nullcontext(lambda state, elapsed: None)


def babysit(api: NodeApi, spec: NodeSpec, watch: BabysitTerms) -> int:
    """Run until the command ends on a healthy node (its exit status) or a stopping signal (130:
    SIGINT, SIGTERM, SIGHUP); recreate the node whenever it is lost. However babysitting ends
    (also by an error from the API), the command and all it started are stopped first."""
    sitter = _Sitter(api, spec, watch)
    with signals.handled(signals.raise_stopped):
        try:
            return sitter.run()
        except (KeyboardInterrupt, signals.Stopped) as stopped:
            name = signal.Signals(stopped.signum).name if isinstance(stopped, signals.Stopped) else "SIGINT"
            watch.note(f"received {name}; stopping the command" if sitter.running is not None else f"received {name}")
            sitter.stop_command()
            watch.note(Kind.STOPPED.word)
            return INTERRUPTED
        finally:
            sitter.stop_command()


class _Sitter:
    def __init__(self, api: NodeApi, spec: NodeSpec, watch: BabysitTerms) -> None:
        self.api, self.spec, self.watch = api, spec, watch
        self.recreated = 0
        self.running: Command | None = None

    def stop_command(self) -> None:
        """Stop the command if it runs; a second signal meanwhile cuts its grace period short."""
        running, self.running = self.running, None
        if running is None:
            return
        try:
            running.stop()
        except (KeyboardInterrupt, signals.Stopped):
            running.stop(grace_s=0)

    def lost(self) -> str | None:
        """Why the node is unusable (its state, or 'gone'), None while it lives."""
        node = self.api.get_node(self.spec.zone, self.spec.name)
        return condition(node) if node is None or node.lost else None

    def bring_back(self, reason: str) -> None:
        name, limit = self.spec.name, self.watch.max_recreates
        if self.recreated >= limit:
            raise TpuctlError(f"{name} is {reason} after {self.recreated} recreations: --max-recreates {limit} is spent; giving up", exit_code=FAILED)
        self.recreated += 1
        self.watch.note(f"{name} is {reason}; recreating it ({self.recreated}/{limit})")
        watch = self.watch
        with watch.status(f"recreating {name}") as progress:
            tries = Tries(progress, watch.note, watch.create_deadline_s, watch.pause)
            back = recover(Lost(self.api, self.spec, watch.candidates), tries, watch.recovery)
        self.spec = back.ensured.spec  # a node hunted into another zone is watched there, its command rerun against it
        watch.note(f"{name} is READY again: {back.line}")

    def run(self) -> int:
        watch, name = self.watch, self.spec.name
        reason = self.lost()
        if reason:
            self.bring_back(reason)
        else:
            with self.watch.status(f"waiting for {name}") as progress:
                lifecycle.wait_ready(self.api, self.spec, None, progress, sleep=watch.pause)
        watch.note(f"watching {name} in {self.spec.zone} every {watch.interval_s:g}s")
        while True:
            if watch.command and self.running is None:
                watch.note("running " + " ".join(watch.command))
                self.running = watch.start(watch.command)
            code = self._sleep_watching()
            if code == 0:
                watch.note("the command finished")
                return 0
            reason = self.lost()
            if reason:
                if self.running is not None:
                    watch.note(f"{name} is {reason}; stopping the command")
                    self.running.stop()
                    self.running = None
                self.bring_back(reason)
                continue
            if code is not None:
                watch.note(f"the command failed with status {code} on a healthy node")
                return code

    def _sleep_watching(self) -> int | None:
        """Wait one interval, returning early with the command's status if it ends."""
        deadline = time.monotonic() + self.watch.interval_s
        while time.monotonic() < deadline:
            if self.running is not None and (code := self.running.poll()) is not None:
                self.running = None
                return code
            time.sleep(min(POLL_S, max(0.0, deadline - time.monotonic())))
        return None
