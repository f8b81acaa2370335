"""The worker's end of its control channel, for timeline lines: whole lines or none, never a wait.

A line is a few hundred bytes sent with MSG_DONTWAIT on the channel's Unix socket, which queues a
message that small whole or refuses it: a step never waits for a launcher that does not read, and
the launcher never reads half a line between the runtime's others ("ready", stacks).
"""

from __future__ import annotations

import json
import os

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (see bootstrap.py)
if TYPE_CHECKING:
    from typing import Any

PREFIX = b"timeline "  # tpuctl/runs/timeline.py's MESSAGE_PREFIX (the runtime imports nothing of the launcher's)


class Channel:
    """Sends `timeline {json}` lines on the worker's control channel (the fd bootstrap.py adopted); with another
    `prefix`, its other lines (`profile {json}`: tpuctl/runtime/profile_capture/requests.py)."""

    def __init__(self, fd: int, prefix: bytes = PREFIX) -> None:
        self._fd = fd
        self._prefix = prefix
        self._socket: Any = None
        self._flags = 0
        self.dropped = 0
        self.first_step_sent = False  # once per process: a second fit (fine-tuning) is not a first step

    def send(self, event: str, **fields: object) -> None:
        line = self._prefix + json.dumps({"event": event, **fields}).encode() + b"\n"
        try:
            if self._socket is None:
                import socket  # here, not at the worker's start: see bootstrap.py

                self._socket = socket.socket(fileno=os.dup(self._fd))
                self._flags = socket.MSG_DONTWAIT
            self._socket.send(line, self._flags)
        except OSError:  # full (BlockingIOError), or the launcher is gone: its reaper ends this worker
            self.dropped += 1
