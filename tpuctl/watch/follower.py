"""The tail beside a running launch: `tpuctl launch --tail` polls the model dir in a thread.

Its lines go through the launch's LineWriter, tagged `[tail]`, between the
workers' own lines; when the workers finish, one last poll and a summary
(last value per tag, last checkpoint). The model dir may not exist until the
script creates it, so the source is opened lazily.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from tpuctl.errors import TpuctlError
from tpuctl.watch.board import Board, plain_lines
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
        try:
            for update in self._tailer.updates(last=last):
                self.board.add(update)
                for line in plain_lines(update):
                    self.write(f"[tail] {line}")
                for damage in update.damage:
                    self.write(f"[tail] warning: {damage.file} at byte {damage.offset}: {damage.reason}")
        except (OSError, TpuctlError) as err:
            self.write(f"[tail] cannot read {self.model_dir}: {err}")

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.poll()

    def finish(self) -> list[str]:
        """Stop polling, read what the workers wrote last, and give the summary lines."""
        self._stop.set()
        self._thread.join(timeout=self.interval + 30)
        self.poll(last=True)
        return self.board.summary()
