"""The worker's end of `tpuctl profile`: requests from its reaper, answers to the launcher.

The launcher's "profile SESSION MILLISECONDS" reaches the worker's reaper on the control channel; the reaper, which
alone reads that channel, writes "SESSION MILLISECONDS STAMP" into a pipe to the worker (STAMP: its time.monotonic()
on receipt; the reaper and the worker share the host's clock). A thread of the worker's, blocked on that pipe, hands
each request to the training thread's steps (tpuctl/runtime/timeline/profiler.py), which begin it at the next step
boundary. A request no step boundary took within PROFILE_BEGIN_S of its receipt is withdrawn and answered as such:
a custom training loop (no boundary tpuctl sees), a step longer than that, a worker stopped or hung. A request read
after that (a worker stopped while it waited in the pipe) is answered and never begun. Answers are one
`profile {json}` line each on the control channel, which the launcher reads among the worker's other messages.
"""

from __future__ import annotations

import os
import threading
import time

from tpuctl.cluster import worker_contract as contract
from tpuctl.runtime.timeline.channel import Channel
from tpuctl.runtime.timeline.profiler import Window

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (see bootstrap.py)
if TYPE_CHECKING:
    from collections.abc import Callable

    from tpuctl.runtime.timeline.profiler import Steps

PREFIX = b"profile "  # the launcher's and the answers' word (tpuctl/launch/process/profiles.py)
NO_STEP = (
    f"no training step began within {contract.PROFILE_BEGIN_S:g}s: a custom training loop (tpuctl sees Keras fit's "
    "steps only), a step longer than that, or a worker stopped or hung"
)
LATE = "the request reached the worker too late to be taken (was it stopped?)"


def listen(requests: int, steps: Steps, channel: int | None) -> None:
    """Serve the requests that come through the pipe `requests`, answering on the control channel `channel`."""
    answers = Channel(channel, prefix=PREFIX) if channel is not None else None

    def answer(event: str, **fields: object) -> None:
        if answers is not None:
            answers.send(event, **fields)

    threading.Thread(target=_serve, args=(requests, steps, answer), name="tpuctl-profile-requests", daemon=True).start()


def read(line: bytes, answer: Callable[..., None]) -> Window | None:
    """The capture one line of the pipe asks for; None (and, where it names a session, an answer) when there is none."""
    body, _, stamp = line.strip().rpartition(b" ")
    asked = contract.profile_line(body)
    try:
        received = float(stamp)
    except ValueError:
        return None
    if asked is None or received != received:  # nan
        return None
    session, milliseconds = asked
    begin_by = received + contract.PROFILE_BEGIN_S
    if time.monotonic() > begin_by:
        answer("not_taken", session=session, why=LATE)
        return None
    seconds = milliseconds / 1000
    return Window(session, seconds=seconds, begin_by=begin_by, end_by=begin_by + seconds + contract.PROFILE_SAVE_S, answer=answer)


def _serve(requests: int, steps: Steps, answer: Callable[..., None]) -> None:
    import select

    poller = select.poll()
    poller.register(requests, select.POLLIN)
    waiting: Window | None = None
    pending = b""
    while True:
        wait_ms = None if waiting is None else max(0.0, waiting.begin_by - time.monotonic()) * 1000 + 1
        ready = poller.poll(wait_ms)
        if waiting is not None and time.monotonic() > waiting.begin_by:
            if steps.withdraw(waiting):
                waiting.refuse(NO_STEP)
            waiting = None
        if not ready:
            continue
        try:
            chunk = os.read(requests, 4096)
        except OSError:
            return
        if not chunk:
            return  # the reaper is gone, and the worker with it
        *lines, pending = (pending + chunk).split(b"\n")
        pending = pending[-1024:]  # a line longer than any request is no request
        for line in lines:
            capture = read(line, answer)
            if capture is None:
                continue
            why = steps.ask(capture)
            if why is not None:
                capture.refuse(why)
            else:
                waiting = capture
