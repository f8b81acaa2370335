"""The tail beside a running launch: `tpuctl launch --tail` polls the model dir in a thread.

Its lines go through the launch's LineWriter, tagged `[tail]`, between the
workers' own lines; when the workers finish, one last poll and a summary
(last value per tag, last checkpoint). The model dir may not exist until the
script creates it, so the source is opened lazily.

Nothing the reading raises escapes (a bad record, a storage failure, a bug):
it becomes one `[tail] cannot read ...` line and the next poll tries again, so
the tail can never end a launch or hide its exit status. What `write` itself
raises (the launch's own output failing) is the caller's: it propagates from
`poll`/`finish`, and ends the polling thread quietly.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from tpuctl.inputs.errors import TpuctlError, one_line
from tpuctl.watch.board import Board, damage_lines, plain_lines
from tpuctl.watch.sources import Source, open_source
from tpuctl.watch.tailer import Tailer

INTERVAL_S = 2.0


class Follower:
    def __init__(self, model_dir: str, write: Callable[[str], None], interval: float = INTERVAL_S) -> None:
        self.model_dir = model_dir
        self.write = write
        self.interval = interval
        self.board = Board()
        self._tailer: Tailer | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tpuctl-tail", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _source(self) -> Source | None:
        try:
            return open_source(self.model_dir)
        except TpuctlError:
            return None  # not created yet: try again next poll

    def poll(self, last: bool = False) -> None:
        if self._tailer is None:
            source = self._source()
            if source is None:
                return
            self._tailer = Tailer(source)
        updates = self._tailer.updates(last=last)
        while True:
            try:
                update = next(updates, None)
            except Exception as err:  # noqa: BLE001 - a tail beside a launch must never end it: any failure is one line
                reason = str(err) if isinstance(err, (OSError, TpuctlError)) else f"{type(err).__name__}: {err}"
                self.write(f"[tail] cannot read {self.model_dir}: {one_line(reason)}")
                return
            if update is None:
                return
            self.board.add(update)
            for line in plain_lines(update) + damage_lines(update):
                self.write(f"[tail] {line}")

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.interval):
                self.poll()
        except Exception:  # noqa: BLE001 - only `write` can raise here: the launch's output failed, there is nowhere to say so
            return

    def finish(self) -> list[str]:
        """Stop polling, read what the workers wrote last, and give the summary lines."""
        self._stop.set()
        if self._thread.ident is not None:  # started (a launch that failed early may never have)
            self._thread.join(timeout=self.interval + 30)
        self.poll(last=True)
        return self.board.summary()
