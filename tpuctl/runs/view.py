"""A run's view: what the TensorBoard plugin and `report --timeline` draw, as one bounded JSON object (run-view/1).

Built from the run folder alone: the timeline read compactly (runs/compact.py), the report's own numbers (the view's
"goodput" is goodput.of_compact's object, never a second computation), the profile verdicts `tpuctl profile` kept and
the stacks views `tpuctl stacks` left. The contract (field by field) is in docs/report.md, its schema (segment kinds,
bounds) in runs/view_schema.py, its words for an end are tpuctl's own (endings.py). Every list is bounded, so a week of
64 workers stays under 2 MB: a row's step rate is binned here (<= RATE_BINS), the goodput over time is GOODPUT_WINDOWS
windows, stacks are cut to STACKS_LIMIT, the kept verdicts and stacks views are the newest that fit PROFILES_BUDGET
and HANGS_BUDGET. Nothing in it comes from --env, a plan or a log, and no path in the log dir: a model
dir is often a shared bucket. Strings are as the timeline has them: plain text, for a page to show as text.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tpuctl.endings import RUNNING, Kind
from tpuctl.inputs.parse import read_small_bytes
from tpuctl.inputs.private_files import private_dir, write_private
from tpuctl.runs import compact, goodput
from tpuctl.runs import timeline as tl
from tpuctl.runs import view_schema as vs
from tpuctl.runs.folder import FULL_STACKS, RunFolder

RATE_BUDGET = 96_000  # every row's bins together (~7 bytes each): 640 rows (64 workers x 10 attempts) get 150 each
SEGMENT_BUDGET = 16_000  # every row's segments together (~70 bytes each); each row keeps at least MIN_SEGMENTS
MIN_SEGMENTS = 24
STALL_S = 3 * tl.STEP_EVERY_S  # no step sample for this long while steps were flowing: the worker stalled
_ENDINGS = {tl.FAILURE: Kind.FAILED.value, tl.PREEMPTED: Kind.PREEMPTED.value, tl.HANG: Kind.HANG.value}
_PROFILES = "profiles"  # LOG_DIR/profiles/<session>.json: `tpuctl profile`'s verdict, kept for the view
_PROFILE_LIMIT = 1 << 20
PROFILES_BUDGET = 64 << 10  # the kept verdicts' JSON together, newest first (64 workers' verdict: ~20 KB)
HANGS_BUDGET = 96 << 10  # the stacks views' JSON together, newest first: the newest whole (STACKS_LIMIT) and more


def build(folder: RunFolder, *, live: bool, model_dir: str | None = None) -> dict[str, Any]:
    """The run's view, as of now where it is `live`. Raises TpuctlError (one line) where the timeline is unreadable."""
    return with_report(folder, live=live, model_dir=model_dir)[0]


def with_report(folder: RunFolder, *, live: bool, model_dir: str | None = None) -> tuple[dict[str, Any], goodput.Report]:
    """The view and the report it holds, from one read of the timeline (`report --timeline` prints both)."""
    read = goodput.read_folder(folder)
    report = goodput.of_compact(read, now=goodput.now_of(read) if live else None, windows=vs.GOODPUT_WINDOWS)
    return of_compact(read, report, folder, live=live, model_dir=model_dir), report


def of_compact(read: compact.Compact, report: goodput.Report, folder: RunFolder, *, live: bool, model_dir: str | None) -> dict[str, Any]:
    wall = _Wall(read.offset)
    events = read.events
    start_ev = next((e for e in events if e.event == tl.RUN_START), None)
    end_ev = next((e for e in reversed(events) if e.event == tl.RUN_END), None)
    start = wall.of(start_ev) if start_ev is not None else wall(read.low)
    end = wall.of(end_ev) if end_ev is not None else (None if live else wall(read.high))
    rows = list(_rows(read, wall, end))
    attempts = _attempts(events, report, wall)
    return {
        "schema": vs.SCHEMA,
        "written": round(time.time(), 3),
        "run": {
            "id": _text(start_ev.fields.get("run_id"), vs.NAME) if start_ev is not None else None,
            "script": _text(start_ev.fields.get("script"), vs.SCRIPT) if start_ev is not None else None,  # its file name, never its path
            "backend": _text(start_ev.fields.get("backend"), vs.WORD) if start_ev is not None else None,
            "state": _text(end_ev.fields.get("state"), vs.WORD) if end_ev is not None else (RUNNING if live else Kind.LOST.value),
            "start": round(start, 3),
            "end": None if end is None else round(end, 3),
            "workers": len({row["worker"] for row in rows}),
            "model_dir": model_dir,
        },
        "attempts": attempts,
        "rows": rows,
        "restarts": _restarts(events, attempts, wall),
        "goodput": report.to_json(),
        "goodput_over_time": [
            {"start": round(wall(a), 3), "end": round(wall(b), 3), "goodput": round(trained / seconds, 4) if seconds > 0 and report.total.steps_seen else None}
            for a, b, trained, seconds in report.windows
        ],
        "profiles": _profiles(folder),
        "hangs": _hangs(folder),
    }


@dataclass(frozen=True)
class _Wall:
    """The timeline's clock (the launcher's monotonic `t`) to wall-clock seconds by one offset, that of its latest
    event: every time in the view goes through it, so its segments measure what the report counts (durations in `t`)
    even where the wall clock jumped during the run (a laptop's suspend, an NTP step); an event's own `wall` is not
    used."""

    offset: float

    def __call__(self, t: float) -> float:
        return t + self.offset

    def of(self, event: tl.Event) -> float:
        return event.t + self.offset


@dataclass
class _Row:
    attempt: int
    worker: str
    segments: list[dict[str, Any]] = field(default_factory=list)
    most: int = MIN_SEGMENTS  # segments kept (stalls and checkpoints of a long run): the earliest
    ending: dict[str, Any] | None = None
    started: float | None = None  # worker_start, else its attempt's start
    ready: float | None = None

    def add(self, kind: str, a: float, b: float) -> None:
        if b > a and len(self.segments) < self.most:
            self.segments.append({"kind": kind, "start": round(a, 3), "end": round(b, 3)})


def _rows(read: compact.Compact, wall: _Wall, run_end: float | None) -> Iterator[dict[str, Any]]:
    """One row per (attempt, worker) that the timeline names, in attempt then worker order."""
    rows: dict[tuple[int, str], _Row] = {}
    attempt_start: dict[int, float] = {}
    attempt_end: dict[int, float] = {}
    environment: dict[int, list[tuple[float, float]]] = {}  # the hosts' environment's spans before each attempt
    opened: dict[int, float] = {}
    for e in read.events:
        if e.attempt is None:
            continue
        if e.event == tl.ENV_BEGIN:
            opened.setdefault(e.attempt, wall.of(e))
        elif e.event == tl.ENV_END and e.attempt in opened:
            environment.setdefault(e.attempt, []).append((opened.pop(e.attempt), wall.of(e)))
        if e.event == tl.ATTEMPT_START:
            attempt_start.setdefault(e.attempt, wall.of(e))
        elif e.event == tl.ATTEMPT_END:
            attempt_end[e.attempt] = wall.of(e)
        if e.worker is None:
            continue
        row = rows.setdefault((e.attempt, e.worker), _Row(e.attempt, e.worker))
        if e.event == tl.WORKER_START and row.started is None:
            row.started = wall.of(e)
        elif e.event == tl.RUNTIME_READY and row.ready is None:
            row.ready = wall.of(e)
        elif e.event in _ENDINGS and row.ending is None:
            row.ending = {"state": _ENDINGS[e.event], "words": _words(e), "at": round(wall.of(e), 3)}
    series = _series(read, wall)
    for attempt, worker in series:
        rows.setdefault((attempt, worker), _Row(attempt, worker))
    own: dict[tuple[int | None, str | None], list[tl.Event]] = {}
    for e in read.events:
        own.setdefault((e.attempt, e.worker), []).append(e)
    bins = max(1, min(vs.RATE_BINS, RATE_BUDGET // max(1, len(rows))))
    causes: dict[int, _Row] = {}  # attempt -> the row whose own ending ended it (the earliest), for the rows the launcher stopped with it
    for row in sorted((r for r in rows.values() if r.ending is not None), key=lambda r: r.ending["at"] if r.ending else 0.0):
        causes.setdefault(row.attempt, row)
    for key in sorted(rows, key=_order):
        row = rows[key]
        row.most = max(MIN_SEGMENTS, SEGMENT_BUDGET // len(rows))
        ends = attempt_end.get(row.attempt) or run_end
        hangs = [e for e in own.get((row.attempt, None), []) if e.event == tl.HANG]  # the launcher's: every worker stopped
        if hangs and row.ending is None:
            row.ending = {"state": Kind.HANG.value, "words": _words(hangs[0]), "at": round(wall.of(hangs[0]), 3)}
        cause = causes.get(row.attempt)
        if row.ending is None and cause is not None and cause.ending is not None and row.attempt in attempt_end:
            # fail-fast: the launcher stopped the rest of the attempt when this one worker ended it
            words = f"{cause.worker} {cause.ending['state']}"  # drawn 'stopped: worker:1 failed'
            row.ending = {"state": Kind.STOPPED.value, "words": words, "at": round(attempt_end[row.attempt], 3)}
        for a, b in environment.get(row.attempt, []):
            row.add(vs.ENVIRONMENT, a, b)
        yield _row(row, series.get(key), own.get(key, []) + hangs, (attempt_start.get(row.attempt), ends), bins, wall)


def _row(row: _Row, steps: _Steps | None, own: list[tl.Event], span: tuple[float | None, float | None], bins: int, wall: _Wall) -> dict[str, Any]:
    """A worker's segments in an attempt (`own`: its events, in time order; `span`: its attempt's) and its step rate.
    Added in the order they matter, so a row past its budget loses stalls and checkpoints, never its steps or hang."""
    attempt_start, attempt_end = span
    begin = row.started if row.started is not None else attempt_start
    first = steps.t[0] if steps is not None else None
    if begin is not None and row.ready is not None:
        row.add(vs.START_UP, begin, row.ready)
    if row.ready is not None and first is not None:
        row.add(vs.FIRST_STEP, row.ready, first)
    if steps is not None:
        row.add(vs.STEPS, steps.t[0], steps.t[-1])
    for e in own:
        if e.event == tl.HANG:
            idle, at = compact.number(e.fields.get("idle_s")), wall.of(e)
            row.add(vs.HANG, at - idle if idle is not None and 0 <= idle < at else at, at)
    spans = {vs.CHECKPOINT_SAVE: (tl.SAVE_BEGIN, tl.SAVE_END), vs.CHECKPOINT_RESTORE: (tl.RESTORE_BEGIN, tl.RESTORE_END)}
    spans[vs.EVALUATION] = (tl.EVAL_BEGIN, tl.EVAL_END)
    busy: list[tuple[float, float]] = []  # the worker's own work between steps: never a stall
    for kind, (opening, closing) in spans.items():
        opened: float | None = None
        for e in own:
            if e.event == opening and opened is None:
                opened = wall.of(e)
            elif e.event == closing and opened is not None:
                busy.append((opened, wall.of(e)))
                row.add(kind, *busy[-1])
                opened = None
        if opened is not None and attempt_end is not None:
            busy.append((opened, attempt_end))
            row.add(kind, *busy[-1])
    if steps is not None:
        for a, b in steps.gaps(STALL_S):
            for free_a, free_b in _outside(a, b, sorted(busy)):
                if free_b - free_a > STALL_S:
                    row.add(vs.STALL, free_a, free_b)
    row.segments.sort(key=lambda s: (s["start"], s["end"]))
    return {"attempt": row.attempt, "worker": row.worker, "segments": row.segments, "rate": steps.rate(bins) if steps else None, "ending": row.ending}


def _outside(a: float, b: float, busy: list[tuple[float, float]]) -> Iterator[tuple[float, float]]:
    """The parts of (a, b) that no span of `busy` (in start order) covers: a 2-minute validation or checkpoint save
    between two step samples is the report's evaluation or save, never a stall."""
    for start, end in busy:
        if end <= a or start >= b:
            continue
        if start > a:
            yield a, start
        a = max(a, end)
    if b > a:
        yield a, b


@dataclass
class _Steps:
    """One worker's samples in an attempt, on the wall clock, in time order."""

    t: list[float] = field(default_factory=list)
    step: list[float] = field(default_factory=list)

    def gaps(self, longest: float) -> Iterator[tuple[float, float]]:
        for a, b in zip(self.t, self.t[1:], strict=False):
            if b - a > longest:
                yield a, b

    def rate(self, bins: int) -> dict[str, Any]:
        """Steps a second in at most `bins` bins: each pair of samples' pace spread over the time between them, so a bin
        holds the time-weighted mean pace of what it covers. (Counted only where a pair ends, a short attempt sampled
        every 30 s would show steps in its last bin alone.)"""
        start, span = self.t[0], self.t[-1] - self.t[0]
        bin_s = max(span / bins, tl.STEP_EVERY_S)
        count = max(1, min(bins, math.ceil(span / bin_s)))
        done, spent = [0.0] * count, [0.0] * count
        for (t0, s0), (t1, s1) in zip(zip(self.t, self.step, strict=True), zip(self.t[1:], self.step[1:], strict=True), strict=False):
            if t1 <= t0 or s0 != s0 or s1 != s1 or s1 < s0:
                continue
            pace = (s1 - s0) / (t1 - t0)
            first, last = (min(int((t - start) / bin_s), count - 1) for t in (t0, t1))
            for index in range(first, last + 1):
                overlap = min(t1, start + (index + 1) * bin_s if index < count - 1 else t1) - max(t0, start + index * bin_s)
                if overlap > 0:
                    done[index] += pace * overlap
                    spent[index] += overlap
        rates = [round(d / s, 4) if s > 0 else None for d, s in zip(done, spent, strict=True)]
        return {"start": round(start, 3), "bin_s": round(bin_s, 3), "steps_per_s": rates}


def _series(read: compact.Compact, wall: _Wall) -> dict[tuple[int, str], _Steps]:
    found: dict[tuple[int, str], _Steps] = {}
    for attempt, samples in read.samples.items():
        if attempt is None:
            continue
        by_index: dict[int, _Steps] = {}
        for t, step, index in zip(samples.t, samples.step, samples.worker, strict=True):
            if index < 0:
                continue
            series = by_index.get(index)
            if series is None:
                series = by_index[index] = found[(attempt, read.workers[index])] = _Steps()
            series.t.append(wall(t))
            series.step.append(step)
    for series in found.values():
        if any(b < a for a, b in zip(series.t, series.t[1:], strict=False)):
            pairs = sorted(zip(series.t, series.step, strict=True), key=lambda p: p[0])
            series.t, series.step = [p[0] for p in pairs], [p[1] for p in pairs]
    return found


def _restarts(events: list[tl.Event], attempts: list[dict[str, Any]], wall: _Wall) -> list[dict[str, Any]]:
    """Each restart at the moment the launcher decided it, with the cause and words of the attempt it ended."""
    endings = {a["attempt"]: a["ending"] for a in attempts}
    found = []
    for e in events:
        if e.event != tl.RESTART:
            continue
        ending = endings.get(e.attempt) or {}
        why = e.fields.get("why")
        cause = ending.get("state") or (Kind.PREEMPTED.value if why == "preemption" else Kind.FAILED.value)  # launch/process/supervisor.py's why
        words = ending.get("words") or _text(why, vs.WORDS)
        found.append({"at": round(wall.of(e), 3), "attempt": _int(e.fields.get("next_attempt")), "cause": cause, "words": words})
    return found[: vs.MAX_ATTEMPTS]


def _attempts(events: list[tl.Event], report: goodput.Report, wall: _Wall) -> list[dict[str, Any]]:
    by_attempt: dict[int | None, list[tl.Event]] = {}
    for e in events:  # grouped once: a run may have a thousand attempts
        by_attempt.setdefault(e.attempt, []).append(e)
    found = []
    for split in report.attempts:
        own = by_attempt.get(split.number, [])
        starts = [wall.of(e) for e in own if e.event == tl.ATTEMPT_START]
        ends = [wall.of(e) for e in own if e.event == tl.ATTEMPT_END]
        cause = next((e for e in own if e.event in _ENDINGS), None)
        ending = None
        if cause is not None:
            ending = {"state": _ENDINGS[cause.event], "words": _words(cause)}
        found.append({"attempt": split.number, "start": starts[0] if starts else None, "end": ends[-1] if ends else None, "ending": ending})
    return found


def keep_profile(folder: RunFolder, session: str, profile_dir: str, verdict: dict[str, Any] | None) -> Path:
    """Keep `tpuctl profile`'s verdict for the view: LOG_DIR/profiles/<session>.json (the session's folder name, as
    TensorBoard's Profile tab names it). Raises OSError."""
    place = folder.path / _PROFILES
    private_dir(place)
    path = place / f"{Path(session).name}.json"
    kept = {"session": Path(session).name, "at": round(time.time(), 3), "profile_dir": profile_dir, "verdict": verdict}
    write_private(path, json.dumps(kept, indent=2) + "\n")
    return path


def _profiles(folder: RunFolder) -> list[dict[str, Any]]:
    """The verdicts `tpuctl profile` kept in LOG_DIR/profiles/ (one JSON file a session), newest last."""
    place = folder.path / _PROFILES
    try:
        names = sorted(p.name for p in place.iterdir() if p.suffix == ".json")[-vs.MAX_PROFILES :]
    except OSError:
        return []
    found = []
    for name in names:
        try:
            data = read_small_bytes(place / name, "profile verdict", limit=_PROFILE_LIMIT)
            kept = json.loads(data) if data is not None else None
        except Exception:  # noqa: BLE001 - a damaged record is left out of a view, never a reason for no view
            continue
        if isinstance(kept, dict):
            where = _text(kept.get("profile_dir"), vs.PATH)
            public = None if where is None or _private(where, folder) else where  # a run on other hosts: its files came to LOG_DIR
            verdict = _public(_base_names(kept.get("verdict")), folder)
            found.append({"session": _text(kept.get("session"), vs.NAME), "at": kept.get("at"), "dir": public, "verdict": verdict})
    return _newest_within(found, PROFILES_BUDGET)


def _newest_within(items: list[dict[str, Any]], budget: int) -> list[dict[str, Any]]:
    """The newest of `items` (oldest first) whose JSON together fits `budget` bytes, oldest first: the view's bound holds
    whatever `tpuctl profile` and `tpuctl stacks` left. One too big for what is left is left out; older ones may fit."""
    kept: list[dict[str, Any]] = []
    for item in reversed(items):
        size = len(json.dumps(item)) + 2
        if size <= budget:
            kept.append(item)
            budget -= size
    return kept[::-1]


def _base_names(verdict: object) -> object:
    """A verdict with each worker's (and unreadable worker's) file as its base name: the host and port that name it,
    never the folder it was read from."""
    if not isinstance(verdict, dict):
        return verdict
    named = dict(verdict)
    for key in ("workers", "unreadable"):
        items = named.get(key)
        if isinstance(items, list):
            named[key] = [{**item, "file": Path(item["file"]).name} if isinstance(item, dict) and isinstance(item.get("file"), str) else item for item in items]
    return named


def _private(path: str, folder: RunFolder) -> bool:
    """Whether `path` is in the run's private folder (by its own spelling or the resolved one)."""
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in _roots(folder))


def _roots(folder: RunFolder) -> set[str]:
    roots = {str(folder.path)}
    with contextlib.suppress(OSError):
        roots.add(str(folder.path.resolve()))
    return {root for root in roots if root not in ("", "/")}


def _public(value: object, folder: RunFolder) -> object:
    """`value` with the log dir's path written LOG_DIR in every string (a note or a reason may name a file there): the
    view goes into a model dir that is often a shared bucket, the log dir stays private."""
    if isinstance(value, str):
        for root in sorted(_roots(folder), key=len, reverse=True):
            value = value.replace(root, "LOG_DIR")
        return value
    if isinstance(value, list):
        return [_public(item, folder) for item in value]
    if isinstance(value, dict):
        return {key: _public(item, folder) for key, item in value.items()}
    return value


def _hangs(folder: RunFolder) -> list[dict[str, Any]]:
    """The newest MAX_HANGS stacks views `tpuctl stacks` (or a hang) left, LOG_DIR/attempt-N/stacks-M/view.txt, oldest
    first: past a hundred `tpuctl stacks` calls the hang that ended the run is still in."""
    taken: list[tuple[float, int, Path]] = []
    try:
        attempts = [(n, p) for p in folder.path.iterdir() if (n := RunFolder.attempt_of(p.name)) is not None]
    except OSError:
        return []
    for number, place in attempts:
        try:
            taken.extend((view.stat().st_mtime, number, view) for view in place.glob("stacks-*/view.txt"))
        except OSError:  # an attempt folder that went away
            continue
    found = []
    for at, number, view in sorted(taken, key=lambda item: (item[0], item[1]))[-vs.MAX_HANGS :]:
        try:
            data = read_small_bytes(view, "stacks view", limit=vs.STACKS_LIMIT * 4) or b""
        except Exception:  # noqa: BLE001 - a stacks view that went away or cannot be read is left out
            continue
        text = data.decode("utf-8", errors="replace")[: vs.STACKS_LIMIT]
        text = str(_public("".join(line for line in text.splitlines(keepends=True) if not line.startswith(FULL_STACKS)), folder))
        summary = next((line.strip() for line in text.splitlines() if line.strip()), "")
        found.append({"at": round(at, 3), "attempt": number, "summary": summary[: vs.WORDS], "stacks": text})
    return _newest_within(found, HANGS_BUDGET)


def _order(key: tuple[int, str]) -> tuple[int, str, int, str]:
    """Attempt, then task type, then index as a number (worker:2 before worker:10), then the name itself."""
    kind, _, index = key[1].rpartition(":")
    return (key[0], kind, int(index), key[1]) if index.isdigit() and len(index) < 7 else (key[0], key[1], -1, key[1])


def _words(event: tl.Event) -> str:
    if event.event == tl.HANG:
        idle = compact.number(event.fields.get("idle_s"))
        return f"no step for {idle:.0f} s" if idle is not None else Kind.HANG.value
    for key in ("status", "why"):
        value = event.fields.get(key)
        if isinstance(value, str) and value:
            return value[: vs.WORDS]
    return _ENDINGS.get(event.event, event.event)


def _text(value: object, limit: int) -> str | None:
    return value[:limit] if isinstance(value, str) else None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
