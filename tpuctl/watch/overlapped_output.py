"""Output written on a thread of its own, so that producing the next chunk overlaps writing this one.

`tail --json` to a pipe writes a few MB per update; the pipe takes 64 KiB at a
time, so most of a write is waiting for the reader, and while the write system
call waits the GIL is free. Writing on a thread lets the next chunk be read and
formatted meanwhile (about 7% of `tail --once --json`, benchmarks/tail_reader.py).
"""

from __future__ import annotations

import threading
from typing import BinaryIO


class OverlappedWriter:
    """One chunk in flight at a time, in order. A write that failed (the reader has gone:
    BrokenPipeError) is raised by the next `write` or by `finish`."""

    def __init__(self, out: BinaryIO) -> None:
        self._out = out
        self._thread: threading.Thread | None = None
        self._error: OSError | None = None

    def write(self, data: bytes) -> None:
        self.finish()
        # A daemon: Ctrl-C ends the command without waiting for a reader that stopped reading.
        self._thread = threading.Thread(target=self._write, args=(data,), name="tpuctl-output", daemon=True)
        self._thread.start()

    def _write(self, data: bytes) -> None:
        try:
            self._out.write(data)
            self._out.flush()
        except OSError as err:
            self._error = err

    def finish(self) -> None:
        """Wait for the chunk in flight; raise its error, if it had one."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        error, self._error = self._error, None
        if error is not None:
            raise error
