"""When a run last moved, for --hang-timeout: any worker's output line, or a new step in the model dir.

The model dir's steps are also the timeline's steps for a script whose runtime reports none
(source "summary"): so a StepWatch runs whenever a model dir is given, not only with --hang-timeout.

A run is stuck when neither happens for the timeout: a worker blocked in its
input pipeline or in a collective prints nothing, and the model dir's event
files gain no step. A script that is merely quiet (no per-step output) but
writes summaries still counts as moving; so does one that only prints.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable

from tpuctl.inputs.errors import TpuctlError
from tpuctl.watch.sources import FileInfo, Source, open_source
from tpuctl.watch.tailer import Tailer, is_event_file

MAX_POLL_S = 10.0
MIN_POLL_S = 0.5
TIMELINE_POLL_S = 5.0  # without --hang-timeout the watch is for the timeline only: a step's time to within this


class ProgressClock:
    """The moment of the last sign of progress; written by the pumps and the step watcher, read by the Supervisor."""

    def __init__(self) -> None:
        self.last = time.monotonic()

    def touch(self) -> None:
        self.last = time.monotonic()


class StepWatch:
    """Polls the model dir's event files on a thread: a step or checkpoint past the highest seen is progress
    (`on_progress`), and a summary step past the highest seen is a step (`on_step`, the timeline's where the
    runtime reports none).

    Event files the model dir held when the watch started (an earlier attempt's or launch's) are never read:
    their steps are not this attempt's, and a bucket's may be large. Old checkpoints are progress at most once.
    Reading failures are not progress and never end the launch: the next poll tries again."""

    def __init__(
        self,
        model_dir: str,
        on_progress: Callable[[], None],
        on_step: Callable[[int], None],
        hang_timeout: float | None,
        quiet_notice: float | None = None,
    ) -> None:
        self._model_dir = model_dir
        self._on_progress = on_progress
        self._on_step = on_step
        self._interval = min(MAX_POLL_S, max(MIN_POLL_S, hang_timeout / 5)) if hang_timeout else TIMELINE_POLL_S
        if quiet_notice:  # a step must be seen before the quiet notice (tpuctl/launch/process/quiet.py) would be said
            self._interval = min(self._interval, max(MIN_POLL_S, quiet_notice / 5))
        self._tailer: Tailer | None = None
        self._old: set[str] = set()
        self._best = self._best_summary = -1
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tpuctl-steps", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        with contextlib.suppress(Exception):  # as below: a folder that cannot be listed holds nothing old
            self._old = {info.path for info in open_source(self._model_dir).list() if is_event_file(info.path)}
        while not self._stop.wait(self._interval):
            try:
                self.poll()
            except Exception:  # noqa: BLE001 - a hang watch must never end a launch; a failed read is simply no progress
                continue

    def poll(self) -> None:
        if self._tailer is None:
            try:
                self._tailer = Tailer(_Newer(open_source(self._model_dir), self._old))
            except TpuctlError:
                return  # not created yet
        for update in self._tailer.updates():
            summary = max((step for _, _, (_, step, _, _) in update.scalars()), default=-1)
            newest = max([summary] + [c.step for c in update.checkpoints if c.step is not None])
            if newest > self._best:
                self._best = newest
                self._on_progress()
            if summary > self._best_summary:
                self._best_summary = summary
                self._on_step(summary)


class _Newer:
    """The model dir as the Tailer reads it, less the event files it held when the watch started."""

    def __init__(self, source: Source, old: set[str]) -> None:
        self._source = source
        self._old = old
        self.root = source.root

    def list(self) -> list[FileInfo]:
        return [info for info in self._source.list() if info.path not in self._old]

    def read(self, path: str, start: int, end: int) -> bytes:
        return self._source.read(path, start, end)
