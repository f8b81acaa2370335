"""What the tail shows: per (run, tag) the latest value, rate, range and a sparkline; checkpoints.

The board keeps a bounded summary per tag (a short history for the
sparkline), never every event, so following a long run costs constant memory.
"""

from __future__ import annotations

import functools
import json
import math
import operator
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

from tpuctl.inputs.terminal import printable
from tpuctl.watch.tailer import Checkpoint, Damage, Update

HISTORY = 24
SPARKS = "▁▂▃▄▅▆▇█"
CHECKPOINTS_SHOWN = 5


@dataclass
class Series:
    step: int
    value: float
    wall_time: float
    first_step: int
    first_time: float
    low: float = math.inf
    high: float = -math.inf
    values: deque[float] = field(default_factory=lambda: deque(maxlen=HISTORY))

    def add(self, step: int, value: float, wall_time: float) -> None:
        self.step, self.value, self.wall_time = step, value, wall_time
        if math.isfinite(value):
            self.low = min(self.low, value)
            self.high = max(self.high, value)
        self.values.append(value)

    def steps_per_s(self) -> float | None:
        elapsed = self.wall_time - self.first_time
        return (self.step - self.first_step) / elapsed if elapsed > 0 and self.step > self.first_step else None

    def sparkline(self) -> str:
        finite = [v for v in self.values if math.isfinite(v)]
        if not finite:
            return ""
        low, high = min(finite), max(finite)
        span = high - low
        return "".join(
            SPARKS[0 if span == 0 else min(len(SPARKS) - 1, int((v - low) / span * len(SPARKS)))] if math.isfinite(v) else "!"
            for v in self.values
        )


@dataclass
class Board:
    series: dict[tuple[str, str], Series] = field(default_factory=dict)
    checkpoints: list[Checkpoint] = field(default_factory=list)
    others: Counter[str] = field(default_factory=Counter)
    damage: list[Damage] = field(default_factory=list)

    def add(self, update: Update) -> None:
        for run, _, scalars in update.batches:
            for tag, step, value, wall_time in scalars:
                series = self.series.get((run, tag))
                if series is None:
                    self.series[(run, tag)] = series = Series(step, value, wall_time, step, wall_time)
                series.add(step, value, wall_time)
        self.checkpoints += update.checkpoints
        self.others.update(update.others)
        self.damage += update.damage

    def rows(self) -> list[list[str]]:
        rows = []
        for (run, tag), series in sorted(self.series.items()):
            rate = series.steps_per_s()
            rows.append(
                [
                    shown(run),
                    shown(tag),
                    number(series.value),
                    str(series.step),
                    f"{rate:.2f}" if rate is not None else "-",
                    number(series.low) if math.isfinite(series.low) else "-",
                    number(series.high) if math.isfinite(series.high) else "-",
                    series.sparkline(),
                ]
            )
        return rows

    def render(self, status: str) -> Any:
        from rich.console import Group
        from rich.markup import escape
        from rich.table import Table
        from rich.text import Text

        table = Table("run", "tag", "value", "step", "steps/s", "min", "max", "recent", box=None, header_style="bold")
        for row in self.rows():
            table.add_row(*(escape(cell) for cell in row))
        parts: list[Any] = [table]
        if self.checkpoints:
            marks = Table("checkpoint", "step", "kind", box=None, header_style="bold")
            for mark in self.checkpoints[-CHECKPOINTS_SHOWN:]:
                marks.add_row(escape(shown(mark.path)), str(mark.step) if mark.step is not None else "-", mark.kind)
            parts.append(marks)
        if self.others:
            parts.append(Text("also: " + ", ".join(f"{count} {shown(kind)}" for kind, count in sorted(self.others.items())), style="dim"))
        parts.append(Text(status, style="dim"))
        return Group(*parts)

    def summary(self) -> list[str]:
        """The last value per tag and the last checkpoint: what a finished launch prints."""
        lines = [f"{shown(run)}/{shown(tag)}: {number(s.value)} at step {s.step}" for (run, tag), s in sorted(self.series.items())]
        if self.checkpoints:
            last = self.checkpoints[-1]
            lines.append(f"last checkpoint: {shown(last.path)}" + (f" (step {last.step})" if last.step is not None else ""))
        return lines


def number(value: float) -> str:
    return f"{value:.6g}"


# Text from a file (a tag, a run folder, a checkpoint or file name) safe for a terminal (terminal.printable), asked per
# line printed: a name full of escapes is worked out once, not on each of a million lines.
shown = functools.lru_cache(maxsize=1 << 16)(printable)


def _json_number(value: float) -> float | str:
    """JSON has no NaN or infinity: those become the strings "nan", "inf", "-inf" (docs/tail.md)."""
    return value if math.isfinite(value) else str(value)


_STRING = json.encoder.encode_basestring_ascii  # C; what json.dumps uses for strings
_VALUE = operator.itemgetter(2)
_WALL_TIME = operator.itemgetter(3)


def json_text(update: Update) -> str:
    """Every JSON line of an update as one string, each line ending in a newline.

    This is `tail --json`'s hot path (a million lines from a large file): the
    constant parts of a scalar's line are built once per run, file and tag, and
    numbers are formatted as json.dumps would (`repr`, which is most of the
    time). JSON has no NaN or infinity: a batch holding one, which a sum of its
    numbers betrays in C (a NaN or infinity makes the sum one; a rare overflow
    only costs the slow way), is built through `_json_number` instead. The
    text is pure ASCII (non-ASCII is escaped)."""
    parts: list[str] = []
    for run, file, scalars in update.batches:
        head = '{"kind": "scalar", "run": ' + _STRING(run) + ', "tag": '
        end = ', "file": ' + _STRING(file) + "}\n"
        prefix = {tag: head + _STRING(tag) + ', "step": ' for tag in {scalar[0] for scalar in scalars}}
        if math.isfinite(sum(map(_VALUE, scalars)) + sum(map(_WALL_TIME, scalars))):
            parts += [f'{prefix[tag]}{step}, "value": {value!r}, "wall_time": {wall_time!r}{end}' for tag, step, value, wall_time in scalars]
        else:
            parts += [
                f'{prefix[tag]}{step}, "value": {json.dumps(_json_number(value))}, "wall_time": {json.dumps(_json_number(wall_time))}{end}'
                for tag, step, value, wall_time in scalars
            ]
    parts += [line + "\n" for line in json_lines(update, scalars=False)]
    return "".join(parts)


def json_lines(update: Update, *, scalars: bool = True) -> list[str]:
    """One object per event, in the documented schema (docs/tail.md); `json_text` is the fast way for scalars."""
    lines = [
        json.dumps({"kind": "scalar", "run": run, "tag": tag, "step": step, "value": _json_number(value), "wall_time": _json_number(wall_time), "file": file})
        for run, file, (tag, step, value, wall_time) in (update.scalars() if scalars else ())
    ]
    lines += [
        json.dumps({"kind": "checkpoint", "run": c.run, "tag": c.kind, "step": c.step, "value": None, "wall_time": _json_number(c.wall_time), "file": c.path})
        for c in update.checkpoints
    ]
    lines += [
        json.dumps({"kind": "other", "run": None, "tag": kind, "step": None, "value": count, "wall_time": None, "file": None})
        for kind, count in sorted(update.others.items())
    ]
    lines += [
        json.dumps({"kind": "damage", "run": None, "tag": d.reason, "step": None, "value": d.offset, "wall_time": None, "file": d.file})
        for d in update.damage
    ]
    return lines


def plain_lines(update: Update) -> list[str]:
    """`RUN TAG step=S value=V` per scalar and `KIND PATH step=S` per checkpoint, names escaped (terminal.printable)."""
    lines = [f"{shown(run)} {shown(tag)} step={step} value={number(value)}" for run, _, (tag, step, value, _) in update.scalars()]
    lines += [f"{c.kind} {shown(c.path)}" + (f" step={c.step}" if c.step is not None else "") for c in update.checkpoints]
    if update.others:
        lines.append("other summaries: " + ", ".join(f"{shown(kind)} +{count}" for kind, count in sorted(update.others.items())))
    return lines


def damage_lines(update: Update) -> list[str]:
    """`warning: FILE at byte N: REASON` per damage found (the callers add their prefix)."""
    return [f"warning: {shown(d.file)} at byte {d.offset}: {shown(d.reason)}" for d in update.damage]
