"""cli/diagnosis/timeline_drawing.py: `report --timeline`'s picture of a run's view, from views built by hand in the
contract's shape ("tpuctl.run-view/1"), with the goodput of a real goodput.Report over a hand-built timeline, each
checked first (tensorboard_plugin/checking.py), as `report --timeline` checks the view it draws."""

from __future__ import annotations

import calendar
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.cells import cell_len

from tests.standins.timelines import WALL0, Clock, one_worker_until_ready
from tpuctl.cli.diagnosis import timeline_drawing
from tpuctl.cli.diagnosis.timeline_drawing import GLYPHS, LEVELS, MIN_WIDTH, ORDER, RESTART
from tpuctl.runs import goodput, view_schema
from tpuctl.runs import timeline as tl
from tpuctl.runs import view as run_view
from tpuctl.runs.folder import RunFolder
from tpuctl.tensorboard_plugin import checking

T0 = 1_764_340_000.0  # 2025-11-28 14:26:40 UTC, on the wall clock
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def draw(the_view: Any, *, width: int, color: bool) -> list[str]:
    """The view drawn as `report --timeline` draws the one it built: checked, then drawn."""
    return timeline_drawing.draw(checking.checked(the_view, logdir=""), width=width, color=color)


def seg(kind: str, start: float, end: float) -> dict[str, Any]:
    return {"kind": kind, "start": T0 + start, "end": T0 + end}


def row(attempt: int, worker: str, segments: list[dict[str, Any]], ending: dict[str, Any] | None = None, rate: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"attempt": attempt, "worker": worker, "segments": segments, "rate": rate, "ending": ending}


def view(rows: list[dict[str, Any]], *, end: float | None, written: float, restarts: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    run: dict[str, Any] = {"id": "20261128-101500-train-ab12", "script": "train.py", "backend": "local", "state": "succeeded" if end else "running"}
    run |= {"start": T0, "end": None if end is None else T0 + end, "workers": 2, "model_dir": "gs://b/m"}
    return {"schema": view_schema.SCHEMA, "written": T0 + written, "run": run, "rows": rows, "restarts": restarts or [], **extra}


def ev(t: float, name: str, attempt: int | None = None, worker: str | None = None, **fields: Any) -> tl.Event:
    return tl.Event(t, T0 + t, name, attempt, worker, fields)


def preempted_report() -> goodput.Report:
    """The report of a run preempted at 61 s and restarted at 70 s (as tests/unit/test_goodput.py's)."""
    events = [ev(0, tl.RUN_START), ev(0, tl.ATTEMPT_START, 1), ev(5, tl.RUNTIME_READY, 1, "worker:0"), ev(10, tl.FIRST_STEP, 1, "worker:0", step=1)]
    events += [ev(60, tl.STEP, 1, "worker:0", step=500, source="keras"), ev(61, tl.PREEMPTED, 1, "worker:0"), ev(62, tl.ATTEMPT_END, 1)]
    events += [ev(62, tl.RESTART), ev(70, tl.ATTEMPT_START, 2), ev(75, tl.RUNTIME_READY, 2, "worker:0"), ev(76, tl.RESTORE_BEGIN, 2, "worker:0")]
    events += [ev(78, tl.RESTORE_END, 2, "worker:0"), ev(80, tl.FIRST_STEP, 2, "worker:0", step=401)]
    events += [ev(t, tl.STEP, 2, "worker:0", step=s, source="keras") for t, s in ((90, 450), (100, 550), (150, 1000))]
    return goodput.analyse([*events, ev(151, tl.ATTEMPT_END, 2), ev(151, tl.RUN_END)])


def restarted_view(report: goodput.Report) -> dict[str, Any]:
    ending = {"state": "preempted", "words": "maintenance event", "at": T0 + 62}
    rows = [
        row(1, f"worker:{w}", [seg("start-up", 0, 5), seg("first-step", 5, 10), seg("steps", 10, 61)], ending) for w in (0, 1)
    ]
    later = [seg("start-up", 70, 75), seg("checkpoint-restore", 76, 78), seg("steps", 80, 151)]
    rows += [row(2, f"worker:{w}", later, {"state": "succeeded", "words": "exit status 0", "at": T0 + 151}) for w in (0, 1)]
    restarts = [{"at": T0 + 62, "attempt": 2, "cause": "preempted", "words": "the VM was preempted (maintenance event)"}]
    return view(rows, end=151, written=151, restarts=restarts, goodput=report.to_json())


def plain(lines: list[str]) -> list[str]:
    return [ANSI.sub("", line) for line in lines]


def row_lines(lines: list[str]) -> list[str]:
    return [line for line in plain(lines) if re.match(r"a[\d?]+ [^(]", line)]  # not the goodput lines: `a1 (62s...`


def test_a_run_with_a_restart_has_a_row_per_worker_and_attempt_the_boundary_in_each_and_its_cause() -> None:
    report = preempted_report()
    lines = draw(restarted_view(report), width=100, color=False)
    rows = row_lines(lines)
    assert [r.split()[:2] for r in rows] == [["a1", "worker:0"], ["a1", "worker:1"], ["a2", "worker:0"], ["a2", "worker:1"]]
    columns = {r.index(RESTART) for r in rows}
    assert len(columns) == 1, rows  # the restart is one boundary across every row
    assert all(r.count(RESTART) == 1 for r in rows)
    assert [r.rstrip().endswith("preempted: maintenance event") for r in rows] == [True, True, False, False]
    assert all(r.rstrip().endswith("succeeded: exit status 0") for r in rows[2:])
    assert any(line.startswith(RESTART) and "into attempt 2: preempted: the VM was preempted (maintenance event)" in line for line in lines)
    # the restart falls at 62 s of 151 (41%): where the axis' ruler, as wide as the bars, says
    ruler = plain(lines)[3]
    bar_start = len(ruler) - len(ruler.lstrip())
    assert set(ruler[bar_start:]) <= {"─", "┬"}
    assert 0.38 < (next(iter(columns)) - bar_start) / (len(ruler) - bar_start) < 0.44


def test_the_goodput_lines_are_the_reports_own_numbers_for_the_run_and_each_attempt() -> None:
    report = preempted_report()
    lines = draw(restarted_view(report), width=120, color=False)
    assert any(line.startswith("run (") and line.endswith(report.summary_line()) for line in lines), lines
    for attempt in report.attempts:
        one = goodput.Report(attempt.split, [], None, finished=False).summary_line()
        ended = f", ended: {attempt.ended}" if attempt.ended else ""
        assert any(line.startswith(f"a{attempt.number} (") and f"{ended}): {one}" in line for line in lines), (one, lines)
    assert report.attempts[0].ended is not None  # the first attempt's line names how it ended


def test_without_colour_every_kind_is_a_character_of_its_own_and_colour_only_adds_escapes() -> None:
    kinds = list(GLYPHS.values())
    assert len(set(kinds)) == len(kinds) and not set(kinds) & set(LEVELS) and RESTART not in [*kinds, *LEVELS]
    rows = [row(1, "worker:0", [seg(k, i * 10, i * 10 + 10) for i, k in enumerate(GLYPHS)] + [seg("steps", 100, 200)])]
    the_view = view(rows, end=200, written=200, restarts=[{"at": T0 + 150, "attempt": 2, "cause": "hang", "words": "no step"}])
    bare, coloured = draw(the_view, width=160, color=False), draw(the_view, width=160, color=True)
    assert not any("\x1b" in line for line in bare)
    assert plain(coloured) == bare  # colour never changes a character
    drawn = row_lines(bare)[0]
    assert all(glyph in drawn for glyph in kinds) and RESTART in drawn and LEVELS[-1] in drawn
    assert "\x1b[1;31m" + GLYPHS["hang"] in "".join(coloured)  # hangs in red where colour is wanted
    legend = " ".join(bare[-3:])
    assert all(f"{glyph} " in legend for glyph in [*kinds, RESTART])


def test_every_kind_of_the_schema_has_its_place_in_the_order_and_a_character() -> None:
    """The checker lets every kind of the schema through and the drawing has no guard of its own: a kind added to the
    schema must be given its importance and its character here, or the drawing would not know it."""
    assert sorted(ORDER) == sorted(view_schema.KINDS) and len(set(ORDER)) == len(ORDER)
    assert set(GLYPHS) == set(view_schema.KINDS) - {view_schema.STEPS}


def test_a_slice_shows_the_kind_that_matters_most_so_a_short_checkpoint_or_hang_survives_a_long_row() -> None:
    week = 7 * 86400
    segments = [seg("start-up", 0, 600), seg("steps", 600, week - 3600), seg("checkpoint-save", 86400, 86401), seg("stall", 90000, 90002)]
    segments += [seg("evaluation", 3 * 86400, 3 * 86400 + 60), seg("hang", week - 3600, week), seg("steps", week - 3599, week - 3598)]
    drawn = row_lines(draw(view([row(1, "worker:0", segments)], end=week, written=week), width=80, color=False))[0]
    bar = drawn[len("a1 worker:0") + 1 :]
    assert bar[0] == LEVELS[-1]  # the first slice holds start-up and steps: the steps matter more
    for kind in ("checkpoint-save", "stall", "evaluation"):
        assert bar.count(GLYPHS[kind]) == 1, (kind, bar)
    assert bar.rstrip()[-1] == GLYPHS["hang"]  # the hang wins its slice over the step inside it
    assert bar.index(GLYPHS["checkpoint-save"]) < bar.index(GLYPHS["stall"]) < bar.index(GLYPHS["evaluation"])


def test_the_step_rate_band_sets_the_blocks_height_against_the_rows_own_fastest() -> None:
    rising = {"start": T0, "bin_s": 60.0, "steps_per_s": [1.0, 2.0, 4.0, None, 8.0]}
    slow = {"start": T0, "bin_s": 60.0, "steps_per_s": [0.1] * 5}
    rows = [row(1, "worker:0", [seg("steps", 0, 300)], rate=rising), row(1, "worker:1", [seg("steps", 0, 300)], rate=slow)]
    fast_bar, slow_bar = (r[len("a1 worker:0") + 1 :].rstrip() for r in row_lines(draw(view(rows, end=300, written=300), width=60, color=False)))
    heights = [LEVELS.index(c) for c in fast_bar]
    assert heights[0] < heights[len(heights) // 2] < heights[-1] == len(LEVELS) - 1
    assert set(slow_bar) == {LEVELS[-1]}  # its own fastest, however slow against the other worker


def test_the_axis_shows_local_clock_times_aligned_to_the_local_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Asia/Kolkata")  # UTC+5:30: a tick aligned to UTC would read hh:30
    time.tzset()
    try:
        start = time.mktime((2026, 11, 28, 10, 0, 0, 0, 0, -1))
        the_view = view([row(1, "worker:0", [seg("steps", start - T0, start - T0 + 3600)])], end=start - T0 + 3600, written=0)
        the_view["run"]["start"] = start
        labels = plain(draw(the_view, width=100, color=False))[2].split()
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    assert labels[0] == "10:00" and len(labels) >= 4, labels
    assert all(re.fullmatch(r"10:[0-5][05]|11:00", label) for label in labels), labels


def test_a_live_run_is_drawn_up_to_when_its_view_was_written() -> None:
    rows = [row(1, "worker:0", [seg("start-up", 0, 30), seg("steps", 30, 1000)])]
    lines = plain(draw(view(rows, end=None, written=1000), width=80, color=False))
    assert "running" in lines[0] and "→ now (view written" in lines[1]
    assert row_lines(lines)[0].rstrip().endswith(LEVELS[-1])  # the steps reach the bar's end: the span ends at `written`


@pytest.mark.parametrize("width", [MIN_WIDTH, 41, 57, 80, 133, 250])
def test_every_line_fits_the_width_with_wide_characters_and_colour(width: int) -> None:
    the_view = restarted_view(preempted_report())
    the_view["rows"][1]["worker"] = "工作者:1-訓練ノード-長い名前"
    the_view["rows"][2]["ending"]["words"] = "失敗しました " * 20
    for color in (False, True):
        lines = draw(the_view, width=width, color=color)
        assert all(cell_len(line) <= width for line in plain(lines)), [(cell_len(line), line) for line in plain(lines)]
    rows = row_lines(draw(the_view, width=width, color=False))
    assert len({cell_len(r[: r.index(RESTART)]) for r in rows}) == 1  # the labels, wide or cut, keep the bars aligned


@pytest.mark.parametrize("width", [-5, 0, 1, 20, MIN_WIDTH - 1])
def test_below_forty_columns_one_line_says_so(width: int) -> None:
    lines = draw(restarted_view(preempted_report()), width=width, color=True)
    assert len(lines) == 1 and cell_len(lines[0]) <= max(width, 0)
    assert width < 10 or "40 columns" in lines[0] or lines[0].endswith("…")


def test_escape_sequences_in_the_views_text_are_shown_escaped_never_passed_to_the_terminal() -> None:
    hostile = "worker:0\x1b]0;pwned\x07\x1b[2J"
    the_view = restarted_view(preempted_report())
    the_view["rows"][0]["worker"] = hostile
    the_view["rows"][0]["ending"] = {"state": "failed\x1b[31m", "words": "line one\nline two\r\x1b[1A\u202e", "at": T0 + 62}
    the_view["restarts"][0]["words"] = "\x9b2J reset"
    the_view["run"]["id"] = "run\x1b[?1049h"
    lines = draw(the_view, width=200, color=False)
    text = "\n".join(lines)
    assert not any(c in text for c in "\x1b\x07\r\x9b\u202e")
    assert "worker:0\\x1b]0;pwned\\x07" in text and "failed\\x1b[31m: line one line two" in text and "\\x9b2J reset" in text
    coloured = "\n".join(draw(the_view, width=200, color=True))
    assert set(re.findall(r"\x1b[^m]*m", coloured)) <= {"\x1b[0m", *(f"\x1b[{c}m" for c in ("94", "2;33", "33", "32", "35", "36", "34", "91", "1;31", "1"))}


def test_a_week_of_64_workers_and_ten_attempts_draws_every_row_and_restart() -> None:
    """What it costs is measured in benchmarks/report_big_timeline.py (the drawing of its week-long view)."""
    week, workers, attempts = 7 * 86400.0, 64, 10
    span = week / attempts
    rows = []
    for attempt in range(attempts):
        base = attempt * span
        segments = [seg("start-up", base, base + 120), seg("first-step", base + 120, base + 300), seg("steps", base + 300, base + span - 60)]
        segments += [seg("checkpoint-save", base + h * 3600, base + h * 3600 + 20) for h in range(1, int(span // 3600))]
        rate = {"start": T0 + base + 300, "bin_s": (span - 360) / 600, "steps_per_s": [1.5 + (i % 17) / 10 for i in range(600)]}
        ending = {"state": "preempted", "words": "maintenance event", "at": T0 + base + span}
        rows += [row(attempt + 1, f"worker:{w}", segments, ending, rate) for w in range(workers)]
    restarts = [{"at": T0 + a * span, "attempt": a + 1, "cause": "preempted", "words": "maintenance event"} for a in range(1, attempts)]
    the_view = view(rows, end=week, written=week, restarts=restarts)
    lines = draw(the_view, width=200, color=True)
    assert len(row_lines(lines)) == workers * attempts
    assert all(r.count(RESTART) == attempts - 1 for r in row_lines(lines))


def _json(leaves: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(leaves, lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5), max_leaves=30)


_LEAVES = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
_TIMES = st.floats(min_value=T0 - 10, max_value=T0 + 1e6) | st.integers(min_value=-(10**20), max_value=10**20) | _LEAVES
_KINDS = st.sampled_from([*GLYPHS, "steps", "bogus"]) | _LEAVES


def _views() -> Iterator[st.SearchStrategy[Any]]:
    """Views whose every field is arbitrary JSON, views of the contract's shape whose every field is arbitrary, and views
    of it that the checker keeps most of (deep parts get reached). What is no view at all the checker refuses in one
    line (test_tensorboard_plugin_static.py)."""
    fields = ("written", "run", "attempts", "rows", "restarts", "goodput")
    yield st.fixed_dictionaries({"schema": st.just(view_schema.SCHEMA)}, optional=dict.fromkeys(fields, _json(_LEAVES)))
    segment = st.fixed_dictionaries({"kind": _KINDS, "start": _TIMES, "end": _TIMES}) | _json(_LEAVES)
    rate = st.fixed_dictionaries({"start": _TIMES, "bin_s": _TIMES, "steps_per_s": st.lists(_TIMES, max_size=20) | _LEAVES})
    ending = st.fixed_dictionaries({"state": _LEAVES, "words": _LEAVES, "at": _TIMES}) | _LEAVES
    segments = st.lists(segment, max_size=6) | _LEAVES
    attempt, worker = st.integers(min_value=-3, max_value=10**7) | _LEAVES, st.text(max_size=20) | _LEAVES  # mostly a row the checker keeps
    one_row = st.fixed_dictionaries({"attempt": attempt, "worker": worker, "segments": segments, "rate": rate | _LEAVES, "ending": ending})
    start, end = st.floats(min_value=T0 - 10, max_value=T0) | _TIMES, st.floats(min_value=T0 + 1, max_value=T0 + 1e6) | _TIMES  # a span
    run = st.fixed_dictionaries({"id": _LEAVES, "state": _LEAVES, "start": start, "end": end, "workers": _LEAVES})  # other types: the first strategy
    split = st.fixed_dictionaries({"wall_s": _TIMES, "goodput": _LEAVES, "categories": st.dictionaries(st.sampled_from(goodput.CATEGORIES), _TIMES) | _LEAVES})
    report = st.fixed_dictionaries({"wall_s": _TIMES, "goodput": _LEAVES, "attempts": st.lists(split | _LEAVES, max_size=3) | _LEAVES}) | split | _LEAVES
    restart = st.fixed_dictionaries({"at": _TIMES, "attempt": _LEAVES, "cause": _LEAVES, "words": _LEAVES}) | _LEAVES
    rows, restarts = st.lists(one_row, max_size=4), st.lists(restart, max_size=3)
    shaped = {"written": _TIMES, "run": run, "attempts": _json(_TIMES), "rows": rows, "restarts": restarts, "goodput": report}
    yield st.fixed_dictionaries({"schema": st.just(view_schema.SCHEMA), **shaped})
    # and views the checker keeps most of (its times, kinds and rows), so that the drawing's every part is reached
    moment = st.floats(min_value=T0 - 10, max_value=T0 + 1e6)
    segment = st.fixed_dictionaries({"kind": st.sampled_from(view_schema.KINDS), "start": moment, "end": moment})
    kept_row = {"attempt": st.integers(min_value=-3, max_value=10**7), "worker": st.text(max_size=20), "segments": st.lists(segment, max_size=6)}
    kept_rows = st.lists(st.fixed_dictionaries({**kept_row, "rate": rate | _LEAVES, "ending": ending}), min_size=1, max_size=4)
    kept_run = st.fixed_dictionaries({"id": _LEAVES, "state": _LEAVES, "start": st.floats(min_value=T0 - 10, max_value=T0), "end": moment | st.none()})
    yield st.fixed_dictionaries({"schema": st.just(view_schema.SCHEMA), **shaped, "written": moment, "run": kept_run, "rows": kept_rows})


@settings(max_examples=400, deadline=None)
@given(st.one_of(*_views()), st.integers(min_value=-3, max_value=300), st.booleans())
def test_any_json_draws_what_it_can_within_the_width_and_never_raises(the_view: Any, width: int, color: bool) -> None:
    lines = draw(the_view, width=width, color=color)
    assert lines and all(isinstance(line, str) for line in lines)
    assert all(cell_len(line) <= max(width, 0) for line in plain(lines))
    assert not any(c in "".join(plain(lines)) for c in "\x1b\x07\r\n\x9b")


@pytest.fixture
def berlin(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The terminal's local time is Europe/Berlin (summer time ends Sunday 2026-10-25, 03:00 -> 02:00)."""
    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.usefixtures("berlin")
def test_a_week_over_the_end_of_summer_time_labels_each_day_once_at_its_midnight(tmp_path: Path) -> None:
    clock = Clock()
    clock.wall_extra = calendar.timegm((2026, 10, 21, 10, 0, 0)) - WALL0 - clock.t  # Wednesday 2026-10-21, 12:00 in Berlin
    timeline = one_worker_until_ready(tmp_path, clock, ready_after=30)
    clock.t += 10
    timeline.event(tl.FIRST_STEP, attempt=1, worker="worker:0", step=1, source="keras")
    for step in range(100, 100 * 7 * 144, 100):  # a step sample every 10 minutes for a week
        clock.t += 600
        timeline.event(tl.STEP, attempt=1, worker="worker:0", step=step, source="keras")
    timeline.flush_steps(1)
    timeline.event(tl.ATTEMPT_END, attempt=1)
    timeline.event(tl.RUN_END, exit_code=0, state="succeeded")
    timeline.close()
    lines = draw(run_view.build(RunFolder(tmp_path), live=False), width=120, color=False)
    labels = lines[2].split()
    days = [" ".join(labels[i : i + 2]) for i in range(0, len(labels), 2)]
    assert days[:3] == ["Thu 22", "Fri 23", "Sat 24"]
    assert len(days) == len(set(days)), days  # today: ['Thu 22', 'Fri 23', 'Sat 24', 'Sun 25', 'Sun 25', 'Mon 26', 'Tue 27']
