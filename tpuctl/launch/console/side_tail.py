"""`launch --tail`'s side-car, fenced off: whatever the tail meets, the launch's outcome stays the workers'.

The tail reads files the workers (or anyone) write into --model-dir; a record
it cannot decode, a file that vanishes, or a bug in the reader must never
kill the launch, turn a worker's exit status 7 into tpuctl's 1, or eat the
failure summary. So the tail runs here in its own thread with every exception
caught: the first one is reported as one `[tail]` line (and one note in the
outcome), and the tail stops; the workers and the Supervisor never see it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from tpuctl.inputs.errors import one_line

if TYPE_CHECKING:
    from tpuctl.watch.follower import Follower

POLL_S = 2.0
FINISH_WAIT_S = 30.0


class SideTail:
    """A Follower polled from a guarded thread; `finish()` gives its summary, or the one line saying why it stopped."""

    def __init__(self, follower: Follower | None, write: Callable[[str], None], interval: float = POLL_S) -> None:
        self._follower = follower
        self._write = write
        self._interval = interval
        self._stop = threading.Event()
        self._lock = threading.Lock()  # one poll at a time: the thread's and finish()'s
        self.failure: str | None = None
        self._thread = threading.Thread(target=self._run, name="tpuctl-tail", daemon=True)

    @classmethod
    def start(cls, model_dir: str, write: Callable[[str], None]) -> SideTail:
        side = cls(None, write)
        side._guard(lambda: side._open(model_dir))
        side._thread.start()
        return side

    def _open(self, model_dir: str) -> None:
        from tpuctl.watch.follower import Follower

        self._follower = Follower(model_dir, self._write)

    def _run(self) -> None:
        while not self._stop.wait(self._interval) and self.failure is None:
            self._guard(lambda: self._poll(last=False))

    def _poll(self, last: bool) -> None:
        if self._follower is not None:
            self._follower.poll(last=last)

    def _guard(self, step: Callable[[], None]) -> None:
        """Run one step of the tail; its first exception, of any kind, ends the tail with one line."""
        with self._lock:
            if self.failure is not None:
                return
            try:
                step()
            except Exception as err:  # noqa: BLE001 - the side-car must not decide the launch's outcome
                self.failure = f"[tail] stopped: {one_line(f'{type(err).__name__}: {err}', 300)}"
                self._emit(self.failure)

    def _emit(self, line: str) -> None:
        with contextlib.suppress(Exception):  # the terminal's trouble is not the launch's
            self._write(line)

    def stop(self) -> None:
        self._stop.set()

    def finish(self) -> list[str]:
        """After the workers: one last read, then the summary lines (none when the tail stopped; see `failure`)."""
        self._stop.set()
        self._thread.join(timeout=FINISH_WAIT_S)
        self._guard(lambda: self._poll(last=True))
        summary: list[str] = []
        if self._follower is not None:
            follower = self._follower
            self._guard(lambda: summary.extend(follower.board.summary()))
        return [] if self.failure is not None else summary
