"""`tpuctl report RUN --timeline`: a run's view (runs/view_schema.py), checked as the TensorBoard tab checks the views
it serves (tensorboard_plugin/checking.py), as lines for a terminal (docs/report.md, "In the terminal").

Each column of a row is a slice of wall time. A slice that holds several kinds of segment shows the one that
matters most: hang > stall > checkpoint (save, then restore) > evaluation > steps > first step > start-up, so a
one-second checkpoint or a hang stays visible in a week-long row. Steps are drawn as block heights (▁ to █) against
the row's own fastest step rate; every kind has a character of its own, so without colour (NO_COLOR) nothing is told
by colour alone.

It draws only a checked view (checking.Checked): every field is of its type or None, within the schema's bounds (a
time is a time the clock can show), and every text is one line escaped for the terminal (inputs.terminal.printable),
so drawing has no guards of its own. It never walks steps: a row costs its segments plus its rate bins (at most
RATE_BINS) plus its columns, so a week of 64 workers draws as fast as a minute of one.
"""

from __future__ import annotations

import datetime
import itertools
import math
import time
from collections.abc import Iterator
from typing import Any

from rich.cells import cell_len, set_cell_size

from tpuctl.cli.display import age
from tpuctl.runs import goodput
from tpuctl.runs.view_schema import CHECKPOINT_RESTORE, CHECKPOINT_SAVE, ENVIRONMENT, EVALUATION, FIRST_STEP, HANG, STALL, START_UP, STEPS
from tpuctl.tensorboard_plugin.checking import Checked

MIN_WIDTH = 40
# Kinds of segment, least important first: a column shows the last of these it holds.
ORDER = (ENVIRONMENT, START_UP, FIRST_STEP, STEPS, EVALUATION, CHECKPOINT_RESTORE, CHECKPOINT_SAVE, STALL, HANG)
GLYPHS = {ENVIRONMENT: "▤", START_UP: "░", FIRST_STEP: "▒", EVALUATION: "▟", CHECKPOINT_RESTORE: "▞", CHECKPOINT_SAVE: "▚", STALL: "╌"}
GLYPHS[HANG] = "╳"  # noqa: RUF001  # a box-drawing cross, meant: no letter X in a bar of blocks
LEVELS = "▁▂▃▄▅▆▇█"  # steps, by step rate against the row's fastest; █ where no rate is known
RESTART = "┃"
_WORDS = {ENVIRONMENT: "environment", START_UP: "start-up", FIRST_STEP: "first step", STEPS: "steps", EVALUATION: "evaluation"}  # the legend's
_WORDS |= {CHECKPOINT_RESTORE: "checkpoint restore", CHECKPOINT_SAVE: "checkpoint save", STALL: "stall", HANG: "hang"}
# ANSI SGR parameters per kind (and the restart boundary); used only when colour is wanted.
_COLOURS = {ENVIRONMENT: "94", START_UP: "2;33", FIRST_STEP: "33", STEPS: "32", EVALUATION: "35", CHECKPOINT_RESTORE: "36"}
_COLOURS |= {CHECKPOINT_SAVE: "34", STALL: "91", HANG: "1;31", RESTART: "1"}
_ROWS, _RESTARTS_LISTED = 1000, 20
_TICKS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800)


def draw(view: Checked, *, width: int, color: bool) -> list[str]:
    """The lines to print, each at most `width` columns as a terminal shows them (wide characters count two):
    a header, the time axis, a line per (attempt, worker) row with its ending's cause at its end, the restarts,
    the goodput of the run and of each attempt, and a legend of the characters used."""
    if width < MIN_WIDTH:
        return [_fit(f"the timeline needs a terminal {MIN_WIDTH} columns wide or more", max(width, 0))]
    span = _span(view)
    lines = [_fit(line, width) for line in _header(view["run"], span, view["written"])]
    rows, restarts = view["rows"][:_ROWS], view["restarts"]
    if span is None or not rows:
        lines.append(_fit("no timeline to draw: the view has no rows or no span of time", width))
    else:
        lines += _rows(rows, restarts, span, width, color)
        hidden = len(view["rows"]) - len(rows)
        if hidden > 0:
            lines.append(_fit(f"… and {hidden} more row(s) not drawn", width))
    lines += [_colour_mark(_fit(line, width), color) for line in _restart_lines(restarts)]
    lines += [_fit(line, width) for line in _goodput_lines(view["goodput"])]
    lines += _legend(width, color)
    return lines


def _rows(rows: list[dict[str, Any]], restarts: list[dict[str, Any]], span: tuple[float, float], width: int, color: bool) -> list[str]:
    """The axis and one line per row: label, bar, ending. The label and the ending take what the bar leaves."""
    labels = [_label(row) for row in rows]
    tails = [_tail(row["ending"]) for row in rows]
    label_w = min(max(cell_len(label) for label in labels), max(11, width // 4))
    tail_w = min(max(cell_len(tail) for tail in tails), max(8, width // 3))
    columns = width - label_w - 1 - (tail_w + 1 if tail_w else 0)
    t0, t1 = span
    slice_s = (t1 - t0) / columns
    boundaries = {c for r in restarts if (c := _column(r["at"], t0, slice_s, columns)) is not None}
    pad = " " * (label_w + 1)
    labels_line, ruler = _axis(t0, t1, columns)
    lines = [pad + labels_line, pad + ruler]
    for row, label, tail in zip(rows, labels, tails, strict=True):
        cells = _cells(row, t0, slice_s, columns)
        for column in boundaries:
            cells[column] = (RESTART, RESTART)
        bar = "".join(_paint(cells, color))
        lines.append(_fit(label, label_w, pad=True) + " " + bar + (" " + _fit(tail, tail_w) if tail else ""))
    return lines


def _cells(row: dict[str, Any], t0: float, slice_s: float, columns: int) -> list[tuple[str, str]]:
    """(character, kind) per column: the most important kind each time slice holds, steps by their rate."""
    marks = [[0] * (columns + 1) for _ in ORDER]  # per kind a difference array: +1 where a segment enters, -1 after it leaves
    for segment in row["segments"]:
        first, last = _columns(segment["start"], segment["end"], t0, slice_s, columns)
        if first <= last:
            marks[ORDER.index(segment["kind"])][first] += 1
            marks[ORDER.index(segment["kind"])][last + 1] -= 1
    cells: list[tuple[str, str]] = [(" ", "")] * columns
    for kind, mark in zip(ORDER, marks, strict=True):  # least important first: a later kind overwrites
        if any(mark):
            glyph = (GLYPHS.get(kind, LEVELS[-1]), kind)
            for column, depth in enumerate(itertools.accumulate(mark[:columns])):
                if depth > 0:
                    cells[column] = glyph
    steps = [column for column, (_, kind) in enumerate(cells) if kind == STEPS]
    if steps:
        rates = _rates(row["rate"], t0, slice_s, steps)
        fastest = max((r for r in rates.values() if r is not None), default=0.0)
        for column in steps:
            cells[column] = (_level(rates[column], fastest), STEPS)
    return cells


def _rates(rate: dict[str, Any] | None, t0: float, slice_s: float, wanted: list[int]) -> dict[int, float | None]:
    """For each wanted column the highest step rate of the rate bins that overlap it (None: no bin says).
    A slice of the bins per column: a row costs its bins once plus its steps' columns."""
    if rate is None:
        return dict.fromkeys(wanted)
    start, bin_s = rate["start"], rate["bin_s"]
    known = [-1.0 if v is None else v for v in rate["steps_per_s"]]  # -1: not a rate
    found: dict[int, float | None] = {}
    for column in wanted:
        first = max(0, math.floor((t0 + column * slice_s - start) / bin_s))
        last = min(len(known) - 1, math.ceil((t0 + (column + 1) * slice_s - start) / bin_s) - 1)
        highest = max(known[first : last + 1], default=-1.0)
        found[column] = highest if highest >= 0 else None
    return found


def _level(rate: float | None, fastest: float) -> str:
    if rate is None or fastest <= 0:
        return LEVELS[-1] if rate is None else LEVELS[0]
    return LEVELS[min(len(LEVELS) - 1, max(0, math.ceil(rate / fastest * len(LEVELS)) - 1))]


def _columns(start: float, end: float, t0: float, slice_s: float, columns: int) -> tuple[int, int]:
    """The first and last column a span [start, end] touches (first > last: none)."""
    first = max(0, math.floor((start - t0) / slice_s))
    last = min(columns - 1, math.ceil((end - t0) / slice_s) - 1)
    return (first, max(first, last)) if first < columns and end >= t0 else (1, 0)


def _column(at: float | None, t0: float, slice_s: float, columns: int) -> int | None:
    if at is None or not (0 <= (at - t0) / slice_s <= columns):
        return None
    return min(columns - 1, math.floor((at - t0) / slice_s))


def _paint(cells: list[tuple[str, str]], color: bool) -> Iterator[str]:
    """The characters, each run of one kind wrapped in its colour when colour is wanted."""
    index = 0
    while index < len(cells):
        kind = cells[index][1]
        end = index
        while end < len(cells) and cells[end][1] == kind:
            end += 1
        text = "".join(char for char, _ in cells[index:end])
        yield f"\x1b[{_COLOURS[kind]}m{text}\x1b[0m" if color and kind in _COLOURS else text
        index = end


def _axis(t0: float, t1: float, columns: int) -> tuple[str, str]:
    """Clock times (local) over the bar and a ruler with a tick under each: as many as fit with two spaces between."""
    step, form = _tick_step(t1 - t0, columns)
    labels, ruler = [" "] * columns, ["─"] * columns
    free = 0
    for tick in _ticks(t0, t1, step):
        column = min(columns - 1, math.floor((tick - t0) / (t1 - t0) * columns))
        text = time.strftime(form, time.localtime(tick))
        if column >= free and column + len(text) <= columns:
            labels[column : column + len(text)] = list(text)
            ruler[column] = "┬"
            free = column + len(text) + 2
    if free == 0:  # no tick fits: the start at least
        text = time.strftime(form, time.localtime(t0))[:columns]
        labels[: len(text)], ruler[0] = list(text), "┬"
    return "".join(labels), "".join(ruler)


def _ticks(t0: float, t1: float, step: float) -> Iterator[float]:
    """The round local times in [t0, t1], `step` apart. From an hour up they are counted on the local calendar from the
    start's midnight (mktime), so past a summer-time change a day tick is still at midnight and labels its own day; below
    an hour, fixed steps from the start's UTC offset (a summer-time change moves the clock by whole hours)."""
    if step < 3600:
        offset = time.localtime(t0).tm_gmtoff
        tick = math.ceil((t0 + offset) / step) * step - offset
        while tick <= t1:
            yield tick
            tick += step
        return
    at = datetime.datetime.combine(datetime.datetime.fromtimestamp(t0).date(), datetime.time())
    while (tick := time.mktime(at.timetuple())) <= t1:  # a naive datetime's timetuple leaves DST to mktime
        if tick >= t0:
            yield tick
        at += datetime.timedelta(seconds=step)


def _tick_step(span: float, columns: int) -> tuple[float, str]:
    """The smallest round step whose labels fit, and the strftime format that says it (with the day past a day)."""
    for step in _TICKS:
        form = "%H:%M:%S" if step < 60 else ("%a %d" if step >= 86400 else "%a %H:%M" if span > 86400 else "%H:%M")
        if span / step <= columns / (len(time.strftime(form, time.localtime(0))) + 2):
            return float(step), form
    days = math.ceil(span / 86400 / max(1, columns // 8))
    return float(days * 86400), "%d %b"


def _header(run: dict[str, Any], span: tuple[float, float] | None, written: float | None) -> list[str]:
    """Which run and how it stands; then its span on the local clock (up to now, for a run still going)."""
    name = " ".join(run[key] for key in ("id", "script") if run[key])
    head = f"run {name or '(no id)'}: {run['state'] or 'state unknown'}"
    if (run["workers"] or 0) > 0:
        head += f", {run['workers']} worker(s)"
    if span is None:
        return [head]
    t0, t1 = span
    if run["end"] is None:
        written_at = f" (view written {time.strftime('%H:%M:%S', time.localtime(written))})" if written is not None else ""
        return [head, f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(t0))} → now{written_at}: {age(t1 - t0)} so far, local time"]
    same_day = time.localtime(t0)[:3] == time.localtime(t1)[:3]
    end = time.strftime("%H:%M:%S" if same_day else "%Y-%m-%d %H:%M:%S", time.localtime(t1))
    return [head, f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(t0))} → {end}: {age(t1 - t0)}, local time"]


def _span(view: Checked) -> tuple[float, float] | None:
    """Run start .. run end, or .. `written` for a run still going; where the view lacks them, its attempts' times."""
    run, attempts = view["run"], view["attempts"]
    start = run["start"]
    if start is None:
        start = min((a["start"] for a in attempts), default=None)
    end = run["end"]
    if end is None:
        end = view["written"]
    if end is None:
        end = max((a["end"] for a in attempts if a["end"] is not None), default=None)
    return (start, end) if start is not None and end is not None and end - start >= 1e-3 else None


def _label(row: dict[str, Any]) -> str:
    return f"a{row['attempt']} {row['worker'] or '?'}"


def _tail(ending: dict[str, Any] | None) -> str:
    """A row's ending: its state and why, as the row's last words."""
    state, words = (ending["state"] or "", ending["words"] or "") if ending is not None else ("", "")
    return f"{state}: {words}" if state and words else state or words


def _restart_lines(restarts: list[dict[str, Any]]) -> list[str]:
    lines = []
    for restart in sorted(restarts, key=lambda r: r["at"])[:_RESTARTS_LISTED]:
        at = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(restart["at"]))
        into = f" into attempt {restart['attempt']}" if restart["attempt"] is not None else ""
        cause, words = restart["cause"] or "cause unknown", restart["words"] or ""
        lines.append(f"{RESTART} restart at {at}{into}: {cause}" + (f": {words}" if words else ""))
    if len(restarts) > _RESTARTS_LISTED:
        lines.append(f"  … and {len(restarts) - _RESTARTS_LISTED} more restart(s)")
    return lines


def _colour_mark(line: str, color: bool) -> str:
    """A restart's line with its mark in the boundary's colour (after the line was cut: escapes take no column)."""
    return f"\x1b[{_COLOURS[RESTART]}m{RESTART}\x1b[0m{line[1:]}" if color and line.startswith(RESTART) else line


def _goodput_lines(report: dict[str, Any] | None) -> list[str]:
    """The run's goodput and each attempt's, in `tpuctl report`'s own words (goodput.Report.summary_line), from the
    numbers of `report --json` the view carries."""
    if report is None:
        return ["goodput: not in the view"]
    lines = [_summary("run", report, "")]
    for attempt in report["attempts"][:_ROWS]:
        lines.append(_summary(f"a{attempt['attempt']}", attempt, f", ended: {attempt['ended']}" if attempt["ended"] else ""))
    return lines


def _summary(name: str, split: dict[str, Any], ended: str) -> str:
    """`a2 (35m, ended: hang): goodput 60%: 40% restart`: a split of `report --json` as the report says it."""
    wall = split["wall_s"]
    if wall is None or wall <= 0:
        return f"{name}{f' ({ended[2:]})' if ended else ''}: goodput unknown (no wall time)"
    categories = dict.fromkeys(goodput.CATEGORIES, 0.0)
    categories |= {category: seconds for category, seconds in split["categories"].items() if category in categories}
    steps_seen = split["goodput"] is not None
    report = goodput.Report(goodput.Split(wall, categories, steps_seen), [], None, finished=False)
    return f"{name} ({age(wall)}{ended}): {report.summary_line()}"


def _legend(width: int, color: bool) -> list[str]:
    """What each character means, wrapped to the width."""
    items = [(GLYPHS[kind] if kind != STEPS else "▁▄█", _WORDS[kind], kind) for kind in ORDER]
    items[ORDER.index(STEPS)] = ("▁▄█", "steps by rate (█ the row's fastest)", STEPS)
    items.append((RESTART, "restart", RESTART))
    lines, line, used = [], "", 0
    for glyphs, words, kind in items:
        shown_glyphs = f"\x1b[{_COLOURS[kind]}m{glyphs}\x1b[0m" if color else glyphs
        size = cell_len(glyphs) + 1 + cell_len(words)
        if used and used + 2 + size > width:
            lines.append(line)
            line, used = "", 0
        line += ("  " if used else "") + f"{shown_glyphs} {words}"
        used += (2 if used else 0) + size
    return [*lines, line]


def _fit(text: str, width: int, *, pad: bool = False) -> str:
    """Text cut to `width` terminal columns (with … where cut), padded to it when `pad`."""
    if cell_len(text) <= width:
        return set_cell_size(text, width) if pad else text
    return set_cell_size(text, width - 1) + "…" if width > 0 else ""
