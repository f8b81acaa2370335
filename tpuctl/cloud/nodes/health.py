"""A TPU node's health as the ssh backend, a run's own VM and babysit read it: its condition in words, one bounded
look, and the wait for a preempted node to be READY again.

`wait_ready_again` is the lighter watch a `tpuctl launch --tpu` keeps after a preemption: it waits for the node to be
READY again, in babysit's words, and recreates nothing (babysit.py's loop recreates).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import TypeVar, cast

from tpuctl.cloud.nodes import lifecycle
from tpuctl.cloud.nodes.node import Node
from tpuctl.cloud.nodes.tpu import NodeApi
from tpuctl.inputs.errors import FAILED, TpuctlError

READY_AGAIN_TIMEOUT_S = 30 * 60.0  # how long a launch waits for its TPU VM after a preemption (docs/ssh.md)
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
