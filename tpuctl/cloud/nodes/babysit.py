"""Keep a (spot) TPU VM alive and a command running on it: the loop behind `tpuctl babysit`.

Spot and preemptible nodes are taken away without notice; the service first
marks them PREEMPTED, later deletes them. The babysitter notices either,
recreates the node from its saved spec and runs the command again — a
`tpuctl launch` with BackupAndRestore then resumes from its last checkpoint.
The command runs on this machine in its own process group under a reaper,
so stopping it stops everything it started, on every way babysitting ends.

`wait_ready_again` is the lighter watch a `tpuctl launch --tpu` keeps after a
preemption: it waits for the node to be READY again, in the same words, and
recreates nothing.
"""

from __future__ import annotations

import queue
import shutil
import signal
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TypeVar, cast

from tpuctl.cloud.capacity.recovery import Candidates, recover
from tpuctl.cloud.nodes import lifecycle
from tpuctl.cloud.nodes.lifecycle import Progress
from tpuctl.cloud.nodes.node import Node
from tpuctl.cloud.nodes.nodespec import NodeSpec
from tpuctl.cloud.nodes.tpu import NodeApi
from tpuctl.endings import INTERRUPTED
from tpuctl.inputs.errors import FAILED, TpuctlError
from tpuctl.safety import reaper, signals
from tpuctl.tpu.capacity import Recovery

STOP_GRACE_S = 10.0
POLL_S = 0.2  # how often the command's exit is checked between looks at the node
READY_AGAIN_TIMEOUT_S = 30 * 60.0  # how long a launch waits for its TPU VM after a preemption (docs/ssh.md)
DEFAULT_MAX_RECREATES = 10  # babysit's --max-recreates when not given: how often a lost node is recreated before it gives up
LOOK_TIMEOUT_S = 120.0  # one look at the node, retries included (TpuApi gives each request 60 s)
# States a node does not leave for READY by itself: only a new create helps.
NO_RETURN = ("TERMINATED", "DELETING")
T = TypeVar("T")


def condition(node: Node | None) -> str:
    """A node's state in babysit's words: "gone", "READY, UNHEALTHY" (READY is not enough), or its state."""
    if node is None:
        return "gone"
    if node.state == "READY" and not node.ready:
        return f"READY, {node.health or 'HEALTH_UNSPECIFIED'}"
    return node.state or "STATE_UNSPECIFIED"


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
class NodeWatch:
    """How to babysit a TPU node: what to run on it, how often to look at the node, when to give up, and where to
    tell the user. Named for the node it watches (tpuctl/watch/ is the training's event files and checkpoints)."""

    command: tuple[str, ...] = ()
    interval_s: float = 30.0
    max_recreates: int = DEFAULT_MAX_RECREATES  # the one budget of recreations (--max-recreates)
    note: Callable[[str], None] = lambda message: None  # one line for the user (the CLI prefixes "babysit: ")
    status: Callable[[str], AbstractContextManager[Progress]] = lambda title: _quiet()  # a progress line around each wait
    start: Callable[[tuple[str, ...]], Command] = Command
    pause: Callable[[float], None] = time.sleep  # between polls of the API while the node is (re)created
    create_deadline_s: float = lifecycle.CREATE_DEADLINE_S  # one recreate stuck in CREATING past it is a stockout
    candidates: Candidates | None = None  # where else the node may go (None: its zone only)
    recovery: Recovery | None = None  # its own zone first, or elsewhere first (None: the default for its kind)


def _quiet() -> AbstractContextManager[Progress]:
    return nullcontext(lambda state, elapsed: None)


def babysit(api: NodeApi, spec: NodeSpec, watch: NodeWatch) -> int:
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
            watch.note("interrupted")
            return INTERRUPTED
        finally:
            sitter.stop_command()


class _Sitter:
    def __init__(self, api: NodeApi, spec: NodeSpec, watch: NodeWatch) -> None:
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
            back = recover(self.api, self.spec, progress, say=watch.note, candidates=watch.candidates, recovery=watch.recovery,
                           deadline_s=watch.create_deadline_s, sleep=watch.pause)  # fmt: skip
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


def wait_ready_again(
    api: NodeApi,
    zone: str,
    name: str,
    note: Callable[[str], None],
    *,
    timeout_s: float = READY_AGAIN_TIMEOUT_S,
    look_timeout_s: float = LOOK_TIMEOUT_S,
    pause: Callable[[float], None] = time.sleep,
) -> Node:
    """After a preemption: wait until the node is READY and HEALTHY again and return it, its hosts
    as they are now (a repair may change their addresses).

    Babysitting without the recreate: a node that is gone, TERMINATED or DELETING will not come
    back by itself, and one not READY within `timeout_s` is given up on; each ends the wait with
    one line (TpuctlError, exit 1). Each new state is one line through `note`. Every look at the
    node is bounded by `look_timeout_s`, so a hanging API cannot hold the wait past its end.
    """
    started = time.monotonic()
    deadline = started + timeout_s
    interval, seen = lifecycle.FIRST_POLL_S, ""
    while True:
        left = deadline - time.monotonic()
        node = _bounded(lambda: api.get_node(zone, name), min(look_timeout_s, max(left, 1.0)), f"about TPU VM {name}")
        now = condition(node)
        if node is not None and node.ready:
            if seen:
                note(f"TPU VM {name} is READY again after {_span(time.monotonic() - started)}")
            return node
        again = f"`tpuctl babysit {name} -- tpuctl launch ...` recreates a lost node and runs the launch again"
        if node is None:
            raise TpuctlError(f"TPU VM {name} was deleted (project {api.project}, zone {zone}): nothing left to relaunch on", hint=again, exit_code=FAILED)
        if node.state in NO_RETURN:
            raise TpuctlError(f"TPU VM {name} is {now}: it will not be READY again by itself", hint=again, exit_code=FAILED)
        if now != seen:
            if seen:
                note(f"TPU VM {name} is {now} ({_span(time.monotonic() - started)})")
            else:
                spot = node.state == "PREEMPTED" and node.capacity != "on-demand"
                tip = f"; a preempted {node.capacity} node is not restarted by the service, `tpuctl babysit` recreates it" if spot else ""
                note(f"TPU VM {name} is {now}; waiting up to {_span(timeout_s)} for it to be READY again{tip}")
            seen = now
        left = deadline - time.monotonic()
        if left <= 0:
            raise TpuctlError(
                f"TPU VM {name} is still {now} after {_span(timeout_s)}; giving up",
                hint=f"`tpuctl describe {name}`; {again}",
                exit_code=FAILED,
            )
        pause(min(interval, left))
        interval = min(lifecycle.MAX_POLL_S, interval * 1.6)


def down_now(api: NodeApi, zone: str, name: str, look_timeout_s: float = LOOK_TIMEOUT_S) -> str | None:
    """One bounded look: the node's condition when it is not READY and HEALTHY ("gone" included), None
    when it is. On a Cloud TPU VM a preemption takes the hosts down with their workers (TensorFlow
    exits 42 only off Google Cloud), so a lost connection is told from a crash by the node itself."""
    node = _bounded(lambda: api.get_node(zone, name), look_timeout_s, f"about TPU VM {name}")
    return None if node is not None and node.ready else condition(node)


def _bounded(call: Callable[[], T], timeout_s: float, what: str) -> T:
    """call() in a daemon thread, given up on after `timeout_s`; a stopping signal still reaches the caller."""
    box: queue.SimpleQueue[tuple[bool, object]] = queue.SimpleQueue()

    def run() -> None:
        try:
            box.put((True, call()))
        except Exception as exc:  # noqa: BLE001 - handed to the caller's thread, which raises it
            box.put((False, exc))

    threading.Thread(target=run, name="tpu-api-look", daemon=True).start()
    try:
        ok, value = box.get(timeout=timeout_s)
    except queue.Empty:
        raise TpuctlError(f"the TPU API did not answer within {_span(timeout_s)} {what}", exit_code=FAILED) from None
    if not ok:
        assert isinstance(value, Exception)
        raise value
    return cast(T, value)


def _span(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.1f}s".replace(".0s", "s")
