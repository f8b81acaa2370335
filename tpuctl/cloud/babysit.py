"""Keep a (spot) TPU VM alive and a command running on it: the loop behind `tpuctl babysit`.

Spot and preemptible nodes are taken away without notice; the service first
marks them PREEMPTED, later deletes them. The babysitter notices either,
recreates the node from its saved spec and runs the command again — a
`tpuctl launch` with BackupAndRestore then resumes from its last checkpoint.
The command runs on this machine in its own process group, so stopping it
stops everything it started.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext, suppress
from dataclasses import dataclass

from tpuctl.cloud import lifecycle
from tpuctl.cloud.lifecycle import Progress
from tpuctl.cloud.nodespec import NodeSpec
from tpuctl.cloud.tpu import NodeApi
from tpuctl.errors import FAILED, TpuctlError

STOP_GRACE_S = 10.0
POLL_S = 0.2  # how often the command's exit is checked between looks at the node
INTERRUPTED = 130


class Command:
    """The user's command in its own process group, so stopping it stops everything it started."""

    def __init__(self, argv: tuple[str, ...], grace_s: float = STOP_GRACE_S) -> None:
        self.grace_s = grace_s
        try:
            self.process = subprocess.Popen(argv, start_new_session=True)
        except OSError as err:
            raise TpuctlError(f"cannot run {argv[0]!r}: {err.strerror}", exit_code=FAILED) from None

    def poll(self) -> int | None:
        return self.process.poll()

    def stop(self) -> None:
        """SIGINT first (a launch then stops its workers cleanly), SIGKILL after a grace period."""
        for sig in (signal.SIGINT, signal.SIGKILL):
            with suppress(ProcessLookupError):
                os.killpg(self.process.pid, sig)
            try:
                self.process.wait(self.grace_s)
                break
            except subprocess.TimeoutExpired:
                continue
        # The leader may be gone while children it started linger in the group.
        with suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)


@dataclass(frozen=True)
class Watch:
    """How to babysit: what to run, how often to look, when to give up, and where to tell the user."""

    command: tuple[str, ...] = ()
    interval_s: float = 30.0
    max_recreates: int = 10
    note: Callable[[str], None] = lambda message: None  # one line for the user (the CLI prefixes "babysit: ")
    status: Callable[[str], AbstractContextManager[Progress]] = lambda title: _quiet()  # a progress line around each wait
    start: Callable[[tuple[str, ...]], Command] = Command
    pause: Callable[[float], None] = time.sleep  # between polls of the API while the node is (re)created


def _quiet() -> AbstractContextManager[Progress]:
    return nullcontext(lambda state, elapsed: None)


def babysit(api: NodeApi, spec: NodeSpec, watch: Watch) -> int:
    """Run until the command ends on a healthy node (its exit status) or Ctrl-C (130); recreate the node whenever it is lost."""
    sitter = _Sitter(api, spec, watch)
    try:
        return sitter.run()
    except KeyboardInterrupt:
        if sitter.running is not None:
            sitter.running.stop()
        watch.note("interrupted")
        return INTERRUPTED


class _Sitter:
    def __init__(self, api: NodeApi, spec: NodeSpec, watch: Watch) -> None:
        self.api, self.spec, self.watch = api, spec, watch
        self.recreated = 0
        self.running: Command | None = None

    def lost(self) -> str | None:
        """Why the node is unusable (its state, or 'gone'), None while it lives."""
        node = self.api.get_node(self.spec.zone, self.spec.name)
        if node is None:
            return "gone"
        return node.state if node.lost else None

    def bring_back(self, reason: str) -> None:
        name, limit = self.spec.name, self.watch.max_recreates
        if self.recreated >= limit:
            raise TpuctlError(f"{name} is {reason} again after {self.recreated} recreations; giving up", exit_code=FAILED)
        self.recreated += 1
        self.watch.note(f"{name} is {reason}; recreating it ({self.recreated}/{limit})")
        with self.watch.status(f"recreating {name}") as progress:
            lifecycle.recreate(self.api, self.spec, progress, sleep=self.watch.pause)
        self.watch.note(f"{name} is READY again")

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
