"""Where a job's replicas' lines go: tagged on the console, saved in the run folder's layout, their last lines kept.

The same as a local launch's workers (tpuctl/launch/console/logs.py does the
copying for both): `[worker:1] ...` on the terminal, in the worker's colour;
the worker's log in the attempt's folder (RunFolder.worker_log) on disk,
appended to (a JobSet restart brings new pods for the same worker within one
attempt's file, Cloud Logging's entries come in batches); TensorFlow's
start-up chatter folded from the console.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tpuctl.launch.console import logs
from tpuctl.launch.console.tf_noise import Fold
from tpuctl.launch.follow.scheduler import LogStream
from tpuctl.runs.folder import RunFolder


@dataclass(frozen=True)
class Sink:
    """One worker's attempt: its console tag, its log file, its tail (the worker's, across attempts)."""

    prefix: str
    path: Path
    tail: logs.Tail
    writer: logs.LineWriter
    fold: Fold

    def pump(self, source: logs.LineSource) -> None:
        logs.pump(source, self.prefix, self.writer, self.path, self.tail, append=True, hide=self.fold.hides)


class Sinks:
    def __init__(self, folder: RunFolder, writer: logs.LineWriter, *, colour: bool, fold: Fold, workers: Sequence[str] = ()) -> None:
        self.folder = folder
        self.writer = writer
        self.colour = colour
        self.fold = fold
        self.workers = list(workers)
        self._tails: dict[str, logs.Tail] = {}
        self._positions: dict[str, int] = {}
        self._attempts: set[int] = set()

    def sink(self, worker: str, attempt: int) -> Sink:
        """The worker's sink for that attempt, its folder made."""
        self.make_attempt(attempt)
        tail = self._tails.setdefault(worker, logs.new_tail())
        return Sink(logs.tag(worker, self._position(worker), self.colour), self.log_path(worker, attempt), tail, self.writer, self.fold)

    def make_attempt(self, attempt: int) -> None:
        """The attempt's folder, made once (a TpuctlError, exit 2, where it cannot be)."""
        if attempt not in self._attempts:
            self.folder.make_attempt(attempt)
            self._attempts.add(attempt)

    def log_path(self, worker: str, attempt: int) -> Path:
        return self.folder.worker_log(attempt, worker)

    def tail(self, worker: str) -> tuple[str, ...]:
        """The worker's last lines so far (none where nothing came from it)."""
        return tuple(self._tails.get(worker, ()))

    def _position(self, worker: str) -> int:
        """Known workers by their order; others after them, as they first appear: a worker keeps its colour."""
        if worker in self.workers:
            return self.workers.index(worker)
        return self._positions.setdefault(worker, len(self.workers) + len(self._positions))


class Pump:
    """A thread that copies one LogStream into its sink until the stream ends, then says why it failed if it did."""

    def __init__(self, stream: LogStream, sink: Sink, notice: Callable[[str], None]) -> None:
        self.stream = stream
        self.stopping = False
        self._notice = notice
        self.thread = threading.Thread(target=self._run, args=(sink,), daemon=True)
        self.thread.start()

    def _run(self, sink: Sink) -> None:
        sink.pump(self.stream)
        why = self.stream.ended()
        if why is not None and not self.stopping:
            self._notice(why)

    def join(self, timeout: float) -> None:
        self.thread.join(timeout=timeout)

    def stop(self) -> None:
        self.stopping = True
        self.stream.stop()
        self.thread.join(timeout=2)
