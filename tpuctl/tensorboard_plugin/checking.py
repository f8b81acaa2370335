"""A view.json as the page may draw it: every field checked, cut to size or left out, whatever the file holds.

A model dir is shared (a team's bucket, a copied folder), so a view is data from anyone: a field may be missing,
of another type, huge, or text meant to be read as HTML. What comes out has only the schema's fields
(tpuctl/runs/view_schema.py; docs/report.md, "The run's view: view.json" and "In TensorBoard"), each of its type or
None, lists cut to the schema's bounds, text as one line escaped for a terminal (stacks as bounded lines), and a count
of what was left out, so the page never guesses and says when the file was not all there. The page then sets every
text with textContent; `report --timeline` draws the view it built only after checking it here too, so the picture in
the terminal and the tab's are of one checked view.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable
from typing import Any, NewType, TypeVar

from tpuctl.inputs.errors import one_line
from tpuctl.runs import view_schema as vs
from tpuctl.tensorboard_plugin.finding import Unreadable

_SESSION = re.compile(r"[\w.-]{1,128}\Z")  # TensorFlow's session folders: 2026_11_28_10_20_00

# A view as `checked` returned it: what the drawings take, so none draws a view that was not checked.
Checked = NewType("Checked", dict[str, Any])

T = TypeVar("T")


class _Checker:
    """Keeps the count of what was left out while a view is checked."""

    def __init__(self) -> None:
        self.left_out = 0

    def items(self, value: object, limit: int, check: Callable[[Any], T | None]) -> list[T]:
        if not isinstance(value, list):
            self.left_out += value is not None
            return []
        self.left_out += max(0, len(value) - limit)
        kept = [checked for item in value[:limit] if (checked := check(item)) is not None]
        self.left_out += min(len(value), limit) - len(kept)
        return kept


def number(value: object) -> float | None:
    """A finite number within the schema's range (bool is not one), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        as_float = float(value)
    except OverflowError:  # an int of a thousand digits
        return None
    return as_float if math.isfinite(as_float) and abs(as_float) < vs.NUMBER_LIMIT else None


def moment(value: object) -> float | None:
    """A time: seconds since the epoch, in [0, TIME_LIMIT) (a clock, a calendar can show it), else None."""
    shown = number(value)
    return shown if shown is not None and 0 <= shown < vs.TIME_LIMIT else None


def whole(value: object) -> int | None:
    shown = number(value)
    return int(shown) if shown is not None and shown == int(shown) else None


def text(value: object, limit: int = 240) -> str | None:
    """One line of at most `limit` characters (control characters escaped), or None for anything not a string."""
    return one_line(value, limit) if isinstance(value, str) else None


def lines(value: object, limit: int = vs.STACKS_LIMIT) -> str | None:
    """Multi-line text (a hang's stacks) kept as lines, cut at `limit` characters, other control characters escaped."""
    if not isinstance(value, str):
        return None
    cut = value[:limit]
    shown = "".join(c if c.isprintable() or c in "\n\t" else repr(c)[1:-1] for c in cut)
    return shown + ("\n…" if len(value) > limit else "")


def view(data: bytes, *, logdir: str) -> Checked:
    """The checked view of `data` (a view.json's bytes), or Unreadable with the line the page shows."""
    try:
        found = json.loads(data)
    except (ValueError, RecursionError) as e:  # not UTF-8, not JSON (a file cut short), nested past the parser's depth
        raise Unreadable("view.json is not JSON (cut short while it was written, or not a view): " + one_line(str(e), 120)) from None
    return checked(found, logdir=logdir)


def checked(found: object, *, logdir: str) -> Checked:
    """The checked view of `found` (a view as JSON holds it), or Unreadable; `logdir` is TensorBoard's, for the
    Profile tab's names of the profile sessions (none where it is empty)."""
    if not isinstance(found, dict):
        raise Unreadable(f"view.json holds no run view: a JSON object with schema {vs.SCHEMA} was expected")
    if found.get("schema") != vs.SCHEMA:
        raise Unreadable(f"view.json's schema is {text(found.get('schema'), 60)!r}, not {vs.SCHEMA}: written by another tpuctl version?")
    check = _Checker()
    shown = {
        "schema": vs.SCHEMA,
        "written": moment(found.get("written")),
        "run": _run(found.get("run")),
        "attempts": check.items(found.get("attempts"), vs.MAX_ATTEMPTS, _attempt),
        "rows": check.items(found.get("rows"), vs.MAX_ROWS, lambda row: _row(row, check)),
        "restarts": check.items(found.get("restarts"), vs.MAX_ATTEMPTS, _restart),
        "goodput": _goodput(found.get("goodput"), check),
        "goodput_over_time": check.items(found.get("goodput_over_time"), vs.GOODPUT_WINDOWS, _window),
        "profiles": check.items(found.get("profiles"), vs.MAX_PROFILES, lambda p: _profile(p, logdir, check)),
        "hangs": check.items(found.get("hangs"), vs.MAX_HANGS, _hang),
    }
    return Checked({**shown, "left_out": check.left_out})


def _run(value: object) -> dict[str, Any]:
    run = value if isinstance(value, dict) else {}
    return {
        "id": text(run.get("id"), vs.NAME),
        "script": text(run.get("script"), vs.SCRIPT),
        "backend": text(run.get("backend"), vs.WORD),
        "state": text(run.get("state"), vs.WORD),
        "start": moment(run.get("start")),
        "end": moment(run.get("end")),
        "workers": whole(run.get("workers")),
        "model_dir": text(run.get("model_dir"), vs.PATH),
    }


def _ending(value: object, *, at: bool = False) -> dict[str, Any] | None:
    if not isinstance(value, dict):
        return None
    ending = {"state": text(value.get("state"), vs.WORD), "words": text(value.get("words"), vs.WORDS)}
    return {**ending, "at": moment(value.get("at"))} if at else ending


def _span(value: dict[str, Any]) -> tuple[float, float] | None:
    start, end = moment(value.get("start")), moment(value.get("end"))
    return (start, end) if start is not None and end is not None and end >= start else None


def _attempt(value: object) -> dict[str, Any] | None:
    if not isinstance(value, dict) or (number_ := whole(value.get("attempt"))) is None or (start := moment(value.get("start"))) is None:
        return None
    return {"attempt": number_, "start": start, "end": moment(value.get("end")), "ending": _ending(value.get("ending"))}


def _segment(value: object) -> dict[str, Any] | None:
    if not isinstance(value, dict) or value.get("kind") not in vs.KINDS or (span := _span(value)) is None:
        return None
    return {"kind": value["kind"], "start": span[0], "end": span[1]}


def _rate(value: object, check: _Checker) -> dict[str, Any] | None:
    if not isinstance(value, dict):
        return None
    start, bin_s, bins = moment(value.get("start")), number(value.get("bin_s")), value.get("steps_per_s")
    if start is None or bin_s is None or bin_s < vs.MIN_BIN_S or not isinstance(bins, list):
        check.left_out += 1
        return None
    check.left_out += max(0, len(bins) - vs.RATE_BINS)
    rates = [rate if (rate := number(b)) is not None and rate >= 0 else None for b in bins[: vs.RATE_BINS]]
    return {"start": start, "bin_s": bin_s, "steps_per_s": rates}


def _row(value: object, check: _Checker) -> dict[str, Any] | None:
    if not isinstance(value, dict) or (attempt := whole(value.get("attempt"))) is None or (worker := text(value.get("worker"), vs.NAME)) is None:
        return None
    return {
        "attempt": attempt,
        "worker": worker,
        "segments": check.items(value.get("segments"), vs.MAX_SEGMENTS, _segment),
        "rate": _rate(value.get("rate"), check) if value.get("rate") is not None else None,
        "ending": _ending(value.get("ending"), at=True),
    }


def _restart(value: object) -> dict[str, Any] | None:
    if not isinstance(value, dict) or (at := moment(value.get("at"))) is None:
        return None
    return {"at": at, "attempt": whole(value.get("attempt")), "cause": text(value.get("cause"), vs.WORD), "words": text(value.get("words"), vs.WORDS)}


def _split(value: dict[str, Any]) -> dict[str, Any]:
    categories = value.get("categories")
    pairs = list(categories.items())[: vs.MAX_CATEGORIES] if isinstance(categories, dict) else []
    return {
        "wall_s": number(value.get("wall_s")),
        "goodput": number(value.get("goodput")),
        "categories": {name: seconds for key, raw in pairs if (name := text(key, vs.WORD)) and (seconds := number(raw)) is not None and seconds >= 0},
    }


def _goodput(value: object, check: _Checker) -> dict[str, Any] | None:
    if not isinstance(value, dict):
        return None

    def attempt(item: object) -> dict[str, Any] | None:
        if not isinstance(item, dict) or (n := whole(item.get("attempt"))) is None:
            return None
        return {"attempt": n, "ended": text(item.get("ended"), vs.WORD), "vm": _ran_on(item.get("vm")), **_split(item)}

    finished = value.get("finished")
    return {
        **_split(value),
        "step_source": text(value.get("step_source"), vs.WORD),
        "finished": finished if isinstance(finished, bool) else None,
        "attempts": check.items(value.get("attempts"), vs.MAX_ATTEMPTS, attempt),
        "skipped_lines": whole(value.get("skipped_lines")),
    }


def _ran_on(value: object) -> dict[str, Any] | None:
    """The run's own TPU VM an attempt ran on (goodput.RanOn), or None."""
    if not isinstance(value, dict) or (node := text(value.get("node"), vs.NAME)) is None or (zone := text(value.get("zone"), vs.NAME)) is None:
        return None
    price = number(value.get("price_per_hour"))
    return {"node": node, "zone": zone, "capacity": text(value.get("capacity"), vs.WORD), "price_per_hour": price if price is not None and price >= 0 else None}


def _window(value: object) -> dict[str, Any] | None:
    if not isinstance(value, dict) or (span := _span(value)) is None:
        return None
    share = number(value.get("goodput"))
    return {"start": span[0], "end": span[1], "goodput": share if share is not None and 0 <= share <= 1 else None}


def _verdict(value: object, check: _Checker) -> dict[str, Any] | None:
    """`tpuctl profile`'s verdict (profiling/verdict.py Verdict.to_json), each worker's file by its base name."""
    if not isinstance(value, dict):
        return None

    def op(item: object) -> dict[str, Any] | None:
        if not isinstance(item, dict) or (name := text(item.get("name"), vs.PATH)) is None:
            return None
        return {"type": text(item.get("type"), vs.NAME), "name": name, "self_pct": number(item.get("self_pct"))}

    def worker(item: object) -> dict[str, Any] | None:
        if not isinstance(item, dict) or (name := text(item.get("worker"), vs.NAME)) is None:
            return None
        step = item.get("step_ms")
        step_ms = {key: number(step.get(key)) for key in ("mean", "stdev", "min", "max")} if isinstance(step, dict) else None
        shares = {key: number(item.get(key)) for key in ("input_pct", "compute_pct", "communication_pct", "other_pct")}
        markers, ops = item.get("markers"), check.items(item.get("top_ops"), vs.MAX_OPS, op)
        found = {"worker": name, "file": text(item.get("file"), vs.SCRIPT), "steps": whole(item.get("steps")), "step_ms": step_ms, **shares}
        return {**found, "top_ops": ops, "markers": markers if isinstance(markers, bool) else None}

    def unreadable(item: object) -> dict[str, Any] | None:
        if not isinstance(item, dict) or (name := text(item.get("worker"), vs.NAME)) is None:
            return None
        return {"worker": name, "file": text(item.get("file"), vs.SCRIPT), "reason": text(item.get("reason"), vs.PATH)}

    return {
        "session": text(value.get("session"), vs.NAME),
        "workers": check.items(value.get("workers"), vs.MAX_WORKERS, worker),
        "straggler": text(value.get("straggler"), vs.NAME),
        "notes": check.items(value.get("notes"), vs.MAX_NOTES, lambda note: text(note, vs.PATH)),
        "unreadable": check.items(value.get("unreadable"), vs.MAX_WORKERS, unreadable),
    }


def _profile(value: object, logdir: str, check: _Checker) -> dict[str, Any] | None:
    if not isinstance(value, dict) or not isinstance(session := value.get("session"), str) or not _SESSION.match(session):
        return None
    where = text(value.get("dir"), vs.PATH)
    return {
        "session": session,
        "at": moment(value.get("at")),
        "dir": where,
        "profile_run": profile_run(logdir, where, session),
        "verdict": _verdict(value.get("verdict"), check),
    }


def _hang(value: object) -> dict[str, Any] | None:
    if not isinstance(value, dict) or (at := moment(value.get("at"))) is None:
        return None
    return {"at": at, "attempt": whole(value.get("attempt")), "summary": text(value.get("summary"), vs.WORDS), "stacks": lines(value.get("stacks"))}


def profile_run(logdir: str, where: str | None, session: str) -> str | None:
    """The Profile tab's name for a session (xprof's "frontend run": the folder holding plugins/profile/, relative
    to TensorBoard's logdir, joined to the session; the session alone at the logdir itself), or None where the
    session's folder is outside this TensorBoard's logdir (the Profile tab does not list it)."""
    if not logdir or not where or not _SESSION.match(session):
        return None
    remote = logdir.startswith("gs://")
    if remote != where.startswith("gs://") or (not remote and not os.path.isabs(where)):
        return None
    base, inside = (logdir.rstrip("/"), where.rstrip("/")) if remote else (os.path.abspath(logdir), os.path.normpath(where))
    if inside == base:
        return session
    if not inside.startswith(base.rstrip("/") + "/"):
        return None
    parts = inside[len(base.rstrip("/")) + 1 :].split("/")
    return None if any(part in ("", ".", "..") for part in parts) else "/".join([*parts, session])
