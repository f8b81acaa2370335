"""A timeline read in one pass with its step samples kept as numbers: how the report and the view read a week-long run.

A week of 64 workers samples ~1.3 M step lines (~150 MB, timeline.STEP_EVERY_S). As Event objects they take GBs, and
json.loads alone spends ~9 s on them on a loaded 2-core machine. Here a step line in the exact shape Timeline writes is
matched by one regex and kept as three numbers (time, step, worker) in its attempt's arrays (20 bytes a line); every
other line goes through timeline.parse_line, so what counts as an event, and what is skipped, is what timeline.read
says. The arrays keep file order: a sample's place in its attempt's arrays breaks ties in time the way timeline.read's
stable sort does.
"""

from __future__ import annotations

import math
import re
from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import BinaryIO

from tpuctl.runs import timeline as tl

CLOCK_LIMIT = 1e12  # seconds: 31,000 years of uptime; beyond it differences of times lose meaning (and 1e308 overflows)
# Timeline._write's step line: the worker's fields (step, source), then t, wall, event, attempt, worker. Only plain ASCII
# worker names, 18-digit steps and times written without an exponent take this path (so every number it reads is finite,
# and a `t` of at most 12 digits is under CLOCK_LIMIT); anything else is one of the other lines, parsed in full.
_STEP_LINE = (
    rb'\{"step": (-?[0-9]{1,18}), "source": "([a-z_]{1,32})", "t": (-?[0-9]{1,12}(?:\.[0-9]{1,9})?), "wall": ([0-9]{1,15}(?:\.[0-9]{1,9})?)'
    rb', "event": "(first_step|step)", "attempt": ([1-9][0-9]{0,5}), "worker": "([\x20\x21\x23-\x5b\x5d-\x7e]{1,200})"\}'
)
# Every line of a chunk, in order: a step line's seven fields, or (group 8) any other line whole.
_LINES = re.compile(rb"^" + _STEP_LINE + rb"$|^(.*)$", re.MULTILINE)
_CHUNK = 1 << 19  # ~4,400 lines: findall holds their fields at once (~2 MB), the memory a chunk costs
MAX_LINE_BYTES = 4 * tl.LINE_LIMIT  # UTF-8 takes at most 4 bytes a character: a longer line holds no event
_STEPS = frozenset({tl.FIRST_STEP, tl.STEP})


@dataclass
class Samples:
    """One attempt's step samples (first_step and step lines) in file order; `step` is NaN where a line had no number."""

    t: array[float] = field(default_factory=lambda: array("d"))
    step: array[float] = field(default_factory=lambda: array("d"))
    worker: array[int] = field(default_factory=lambda: array("i"))  # an index into Compact.workers, -1: none named
    first_mark: float = math.inf  # the earliest first_step line's time


@dataclass
class Compact:
    events: list[tl.Event]  # every event but the steps, in time order
    samples: dict[int | None, Samples]  # per attempt (None: steps no attempt claims)
    workers: list[str]
    sources: set[str]  # the steps' `source`s
    skipped: int  # lines that were not events, and events at times no clock reaches
    low: float = math.inf  # the earliest and latest time of any event, steps included
    high: float = -math.inf
    last_wall: float = 0.0  # the wall-clock time of the latest event (the last one read of those at `high`)

    @property
    def empty(self) -> bool:
        return self.low > self.high

    @property
    def offset(self) -> float:
        """wall - t at the latest event: turns the timeline's clock into wall-clock time."""
        return self.last_wall - self.high if not self.empty else 0.0

    @property
    def steps_seen(self) -> bool:
        return any(len(s.t) for s in self.samples.values())


class Builder:
    """Takes events one at a time (lines of a file, or Event objects) and keeps them compact."""

    def __init__(self) -> None:
        self.compact = Compact([], {}, [], set(), 0)
        self._worker_index: dict[str, int] = {}

    def line(self, raw: bytes) -> None:
        """A line that is not a step line in Timeline's own shape: parsed as timeline.read parses it."""
        text = raw.decode("utf-8", errors="replace")
        event = tl.parse_line(text) if len(text) <= tl.LINE_LIMIT else None
        if event is None:
            self.compact.skipped += bool(text.strip())
        else:
            self.event(event)

    def event(self, event: tl.Event) -> None:
        if abs(event.t) >= CLOCK_LIMIT:
            self.compact.skipped += 1
        elif event.event in _STEPS:
            source = event.fields.get("source")
            step = number(event.fields.get("step"))
            name = source if isinstance(source, str) else None
            self.step(event.attempt, event.worker, event.t, event.wall, math.nan if step is None else step, name, event.event == tl.FIRST_STEP)
        else:
            self._seen(event.t, event.wall)
            self.compact.events.append(event)

    def done(self) -> Compact:
        self.compact.events.sort(key=lambda e: e.t)  # stable: same-time events keep their order
        return self.compact

    def step(self, attempt: int | None, worker: str | None, t: float, wall: float, step: float, source: str | None, first: bool) -> None:
        self._seen(t, wall)
        compact = self.compact
        samples = compact.samples.get(attempt)
        if samples is None:
            samples = compact.samples[attempt] = Samples()
        samples.t.append(t)
        samples.step.append(step)
        samples.worker.append(self.index(worker))
        if first and t < samples.first_mark:
            samples.first_mark = t
        if source is not None:
            compact.sources.add(source)

    def _seen(self, t: float, wall: float) -> None:
        compact = self.compact
        compact.low = min(compact.low, t)
        if t >= compact.high:
            compact.high, compact.last_wall = t, wall

    def index(self, worker: str | None) -> int:
        if worker is None:
            return -1
        index = self._worker_index.get(worker)
        if index is None:
            index = self._worker_index[worker] = len(self.compact.workers)
            self.compact.workers.append(worker)
        return index


def of_file(file: BinaryIO, limit: int) -> Compact:
    """The compact reading of a timeline file (opened "rb"), read in chunks of whole lines up to `limit` bytes (a live
    run's file grows while it is read: what came later waits for the next read).

    This loop is the hot path of a 1.3 M-line file: one regex scan a chunk (findall: no call a line), and a step line
    that continues its attempt in time order is appended here, with that attempt's arrays at hand. Memory is a chunk
    and the start of one line, never a line's whole: a line longer than any event (a crash's file of NULs with no
    newline, gigabytes of it) is counted as skipped once its first MAX_LINE_BYTES are seen, and its rest is passed over
    up to its newline."""
    builder = Builder()
    compact = builder.compact
    attempt, samples = 0, Samples()
    workers: dict[bytes, int] = {}
    sources: set[bytes] = set()
    pending = b""  # the start of a line that the last chunk cut
    passing = False  # inside an over-long line: its bytes are passed over up to its newline
    left = limit
    while left > 0:
        chunk = file.read(min(_CHUNK, left))
        left -= len(chunk)
        if not chunk:
            chunk, left = b"\n", 0  # the end of the file ends its last line
        if passing:
            end = chunk.find(b"\n")
            if end < 0:
                continue
            chunk, passing = chunk[end + 1 :], False
        cut = chunk.rfind(b"\n") + 1
        lines, pending = (pending + chunk[:cut], chunk[cut:]) if cut else (b"", pending + chunk)
        if len(pending) > MAX_LINE_BYTES:
            compact.skipped += 1
            pending, passing = b"", True
        for step, source, t_text, wall_text, event, number_text, worker, other in _LINES.findall(lines):
            if not event:
                builder.line(other)
                continue
            t, number = float(t_text), int(number_text)
            if number == attempt and event == b"step" and t >= compact.high:
                index = workers.get(worker)
                if index is None:
                    index = workers[worker] = builder.index(worker.decode("ascii"))
                samples.t.append(t)
                samples.step.append(float(step))
                samples.worker.append(index)
                sources.add(source)
                compact.high, compact.last_wall = t, float(wall_text)
                continue
            name = worker.decode("ascii")
            builder.step(number, name, t, float(wall_text), float(step), source.decode("ascii"), event == b"first_step")
            attempt, samples = number, compact.samples[number]
    compact.sources.update(source.decode("ascii") for source in sources)
    return builder.done()


def of_events(events: Iterable[tl.Event], skipped: int = 0) -> Compact:
    builder = Builder()
    builder.compact.skipped = skipped
    for event in events:
        builder.event(event)
    return builder.done()


def number(value: object) -> float | None:
    """A finite number, or None (a bool, text, an int too big for a float)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None
