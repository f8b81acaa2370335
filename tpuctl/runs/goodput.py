"""Where a run's wall time went, from its timeline (runs/timeline.py): categories that sum to the wall time, and the goodput.

The time between the run's start and its end (or its last event, or now, for a run still going) is cut at
every moment the timeline marks (an attempt's start and end, runtime ready, first step, a checkpoint's
begin and end, ...) and each piece is given exactly one category by `_Attempt.category`, so the categories
add up to the wall time by construction, whatever order or nonsense the events come in. docs/report.md
says how each category is measured.
"""

from __future__ import annotations

import bisect
import itertools
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tpuctl.endings import Kind
from tpuctl.inputs import parse as inputs
from tpuctl.inputs.errors import FAILED, TpuctlError
from tpuctl.runs import compact
from tpuctl.runs import timeline as tl
from tpuctl.runs.folder import RunFolder
from tpuctl.runs.vm_record import MAX_PRICE

START_UP, FIRST_STEP, TRAINING = "start-up", "first step", "training steps"
SAVE, RESTORE, LOST_WORK, RESTART, HANG, OTHER = "checkpoint save", "checkpoint restore", "lost work", "restart", "hang", "other"
EVALUATION = "evaluation"
# A run's own TPU VM (`launch --new-tpu`, timeline.NODE_EVENTS): the time before the first attempt spent getting it
# (hunting: the tries that stocked out; provisioning: the try that held, create and READY), and the time between two
# attempts spent recreating it after a preemption. Carved out of `other` and `restart`, which keep the rest of those spans.
PROVISIONING, HUNTING, RECOVERY = "provisioning", "stockout hunting", "preemption recovery"
# The hosts' environment (an ssh launch's --requirements and --setup: timeline.ENV_BEGIN -> ENV_END) before an
# attempt's workers start: carved out of whatever the span would be else (`other` before the first, `restart` later).
ENVIRONMENT = "environment setup"
CATEGORIES = (TRAINING, START_UP, FIRST_STEP, SAVE, RESTORE, EVALUATION, LOST_WORK, RESTART, HANG, OTHER, PROVISIONING, HUNTING, RECOVERY, ENVIRONMENT)
_CLOCK_LIMIT = compact.CLOCK_LIMIT
# bytes: a week of 64 workers samples ~150 MB of steps, read streamed (~2 s, 20 bytes kept a step line); 4 GiB is ~25
# such weeks, and past it the file is no timeline of ours (a link to a disk image) and not worth minutes of reading.
TIMELINE_LIMIT = 4 << 30
# How an attempt ended, by the first of these events its timeline has.
_ENDINGS = ((Kind.HANG, tl.HANG), (Kind.PREEMPTED, tl.PREEMPTED), (Kind.FAILED, tl.FAILURE))


@dataclass
class Split:
    """Seconds per category over a span; `goodput` is None where no step was seen (nothing says what trained)."""

    wall_s: float = 0.0
    categories: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CATEGORIES, 0.0))
    steps_seen: bool = False

    @property
    def goodput(self) -> float | None:
        if not self.steps_seen or self.wall_s <= 0:
            return None
        return self.categories[TRAINING] / self.wall_s

    def add(self, category: str, seconds: float) -> None:
        self.categories[category] += seconds
        self.wall_s += seconds

    def to_json(self) -> dict[str, Any]:
        goodput = self.goodput
        return {
            "wall_s": round(self.wall_s, 3),
            "goodput": None if goodput is None else round(goodput, 4),
            "categories": {name: round(seconds, 3) for name, seconds in self.categories.items()},
        }


@dataclass(frozen=True)
class RanOn:
    """The run's own TPU VM an attempt ran on (launch --new-tpu), as the provision_end or recreate_end that made it
    usable says: a recreate may bring it back in another zone or as another capacity kind, at another list price."""

    node: str
    zone: str
    capacity: str | None = None
    price_per_hour: float | None = None  # its list price in USD an hour; None: no SKU prices it (a reservation's)

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "zone": self.zone, "capacity": self.capacity, "price_per_hour": self.price_per_hour}


@dataclass
class AttemptSplit:
    number: int
    ended: Kind | None  # preempted, failed, hang where the timeline says so
    split: Split
    vm: RanOn | None = None  # the run's own TPU VM it ran on (launch --new-tpu), from the node events

    def to_json(self) -> dict[str, Any]:
        vm = None if self.vm is None else self.vm.to_json()
        return {"attempt": self.number, "ended": None if self.ended is None else self.ended.value, "vm": vm, **self.split.to_json()}


@dataclass
class Report:
    total: Split
    attempts: list[AttemptSplit]
    step_source: str | None  # "keras", "summary" (both, comma-separated), None: no step seen
    finished: bool  # the timeline has the run's end
    skipped: int = 0  # lines of the file that were not events
    # (start, end, training seconds, wall seconds) of equal windows over the run, where of_compact was asked for them
    windows: list[tuple[float, float, float, float]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            **self.total.to_json(),
            "step_source": self.step_source,
            "finished": self.finished,
            "attempts": [attempt.to_json() for attempt in self.attempts],
            "skipped_lines": self.skipped,
        }

    def losses(self, limit: int = 3) -> list[tuple[str, float]]:
        """The biggest categories that are not training, with their share of the wall time (at least 0.5% each)."""
        wall = self.total.wall_s
        if wall <= 0:
            return []
        shares = [(name, seconds / wall) for name, seconds in self.total.categories.items() if name != TRAINING]
        return sorted((item for item in shares if item[1] >= 0.005), key=lambda item: -item[1])[:limit]

    def costs(self, usd_per_hour: float, by_attempt: Mapping[int, float] | None = None) -> dict[str, float]:
        """USD per category at a price of the run's machines per hour: the wall time's cost split as the time is, each
        attempt's time at its own price where `by_attempt` (by attempt number) has one, the time after the last attempt
        (the run's end) at the last attempt's. What is not training is the badput's cost; the sum is the run's cost."""
        prices = by_attempt or {}
        costs = dict.fromkeys(self.total.categories, 0.0)
        rest = dict(self.total.categories)
        for attempt in self.attempts:
            price = prices.get(attempt.number, usd_per_hour)
            for name, seconds in attempt.split.categories.items():
                costs[name] += seconds / 3600 * price
                rest[name] -= seconds
        last = prices.get(self.attempts[-1].number, usd_per_hour) if self.attempts else usd_per_hour
        return {name: usd + max(rest[name], 0.0) / 3600 * last for name, usd in costs.items()}

    def list_prices(self, usd_per_hour: float | None) -> dict[int, float | None]:
        """Each attempt's list price: that of the run's own VM it ran on (a recreate may change it), else `usd_per_hour`
        (a run on one VM all along: the price its record keeps). None for a VM no SKU prices."""
        return {a.number: a.vm.price_per_hour if a.vm is not None else usd_per_hour for a in self.attempts}

    def summary_line(self) -> str:
        """`goodput 71%: 18% start-up, 6% restart, ...`, the launch summary's line and outcome.json's `goodput.line`."""
        goodput = self.total.goodput
        head = "goodput unknown (no training steps seen: docs/report.md)" if goodput is None else f"goodput {goodput:.0%}"
        losses = ", ".join(f"{share:.0%} {name}" for name, share in self.losses())
        return f"{head}: {losses}" if losses else head


def analyse(events: Sequence[tl.Event], *, now: float | None = None, skipped: int = 0) -> Report:
    """The report of a timeline's events (in time order, as timeline.read gives them).

    `now` (on the timeline's clock) ends a run that has no run_end yet and still goes on; None ends it at its last event
    (a run killed without a word). A time no monotonic clock reaches (past 1e12 s) is not an event: counted as skipped."""
    return of_compact(compact.of_events(events, skipped), now=now)


def of_compact(read: compact.Compact, *, now: float | None = None, windows: int = 0) -> Report:
    """The report of a timeline read compactly (runs/compact.py): the one computation the report and the view share.
    `windows` > 0 also splits the run into that many equal windows, each piece of time counted where it fell (the view's
    goodput over time: the same pieces and categories as the totals, never a second computation)."""
    if read.empty:
        return Report(Split(), [], None, finished=False, skipped=read.skipped)
    events = read.events
    starts = [e.t for e in events if e.event == tl.RUN_START]
    ends = [e.t for e in events if e.event == tl.RUN_END]
    begin = starts[0] if starts else read.low
    finished = bool(ends)
    end = ends[-1] if ends else max(read.high, now if now is not None else read.high)
    end = max(end, begin)
    attempts = _attempts(read, begin, end)
    if attempts and not finished:
        attempts[-1].unended = True
    node = _NodeSpans.of(events, attempts, end)
    environment = _spans(events, tl.ENV_BEGIN, tl.ENV_END, end)  # the launcher's: a begin with no end was killed there
    cuts = {begin, end, *node.cuts(), *(t for span in environment for t in span)}
    for attempt in attempts:
        cuts.update(attempt.cuts())
    points = sorted(t for t in cuts if begin <= t <= end)
    total = Split()
    per_attempt = {attempt.number: Split() for attempt in attempts}
    attempt_ends = [attempt.end for attempt in attempts]
    width = (end - begin) / windows if windows else 0.0
    over_time = [[begin + i * width, begin + (i + 1) * width, 0.0, 0.0] for i in range(windows if width > 0 else 0)]
    for a, b in itertools.pairwise(points):
        middle = (a + b) / 2
        index = bisect.bisect_right(attempt_ends, middle)
        if index >= len(attempts):
            category, owner = OTHER, None  # after the last attempt: the run's own end
        else:
            owner = attempts[index]
            category = owner.category(middle, restarted=index > 0)
        if category in (OTHER, RESTART):  # outside every attempt's own time: the run's VM may account for it
            category = node.category(middle) or category
        if _within(environment, middle):
            category = ENVIRONMENT
        total.add(category, b - a)
        if owner is not None:
            per_attempt[owner.number].add(category, b - a)
        if windows:
            _spread(over_time, a, b, category == TRAINING)
    seen = read.steps_seen
    total.steps_seen = seen
    for split in per_attempt.values():
        split.steps_seen = seen
    source = ", ".join(sorted(read.sources)) if read.sources else ("unnamed" if seen else None)
    ran_on = _vms(events)
    splits = [AttemptSplit(a.number, a.ended, per_attempt[a.number], _vm_at(ran_on, a.start)) for a in attempts]
    return Report(total, splits, source, finished, read.skipped, [(w[0], w[1], w[2], w[3]) for w in over_time])


def _vms(events: Sequence[tl.Event]) -> list[tuple[float, RanOn]]:
    """When the run's own VM became usable, and which it was: each provision_end and recreate_end, in time order.
    A price that is no price (a string, NaN, negative, past MAX_PRICE: a file anyone could edit) is none."""
    found = []
    for e in events:
        if e.event in (tl.PROVISION_END, tl.RECREATE_END):
            node, zone, capacity, usd = (e.fields.get(key) for key in ("node", "zone", "capacity", "price_per_hour"))
            if isinstance(node, str) and isinstance(zone, str):
                price = float(usd) if isinstance(usd, (int, float)) and not isinstance(usd, bool) and 0 <= usd <= MAX_PRICE else None
                found.append((e.t, RanOn(node, zone, capacity if isinstance(capacity, str) else None, price)))
    return found


def _vm_at(ran_on: list[tuple[float, RanOn]], start: float) -> RanOn | None:
    """The VM an attempt started at `start` ran on: the last one made usable before it."""
    index = bisect.bisect_right([t for t, _ in ran_on], start)
    return ran_on[index - 1][1] if index else None


def _spread(over_time: list[list[float]], a: float, b: float, training: bool) -> None:
    """Count the piece a -> b into the windows it overlaps: [start, end, training seconds, wall seconds] each."""
    if not over_time or b <= a:
        return
    begin, width = over_time[0][0], over_time[0][1] - over_time[0][0]
    first = min(int((a - begin) / width), len(over_time) - 1)
    last = min(int((b - begin) / width), len(over_time) - 1)
    for window in over_time[max(first, 0) : last + 1]:
        overlap = min(b, window[1]) - max(a, window[0])
        if overlap > 0:
            window[3] += overlap
            window[2] += overlap if training else 0.0


def of_folder(folder: RunFolder, *, live: bool) -> Report:
    """The report of a run's folder, so far where the run is `live` (it goes on: its end is now)."""
    read = read_folder(folder)
    return of_compact(read, now=now_of(read) if live else None)


def read_folder(folder: RunFolder) -> compact.Compact:
    """A run folder's timeline, streamed into compact form (runs/compact.py).

    The file is opened as tpuctl.inputs.parse opens any file it is handed (a regular file only: a FIFO or a link to
    /dev/zero is refused, never waited on) and read a line at a time, so memory grows with the step samples (20 bytes
    each), never with the file. TIMELINE_LIMIT still refuses what no run writes (a link to a disk image) before a
    minute goes into reading it. What is not an event is counted. Nothing readable: one line, exit 1."""
    path = folder.timeline
    fd = inputs.open_regular(path, "timeline", FAILED)
    if fd is None:
        raise TpuctlError(f"no timeline in {folder.path}", hint="a run launched before tpuctl kept timelines has none", exit_code=FAILED)
    with os.fdopen(fd, "rb") as file:
        try:
            if os.fstat(fd).st_size > TIMELINE_LIMIT:
                raise TpuctlError(f"timeline {path} is larger than {TIMELINE_LIMIT} bytes", exit_code=FAILED)
            read = compact.of_file(file, TIMELINE_LIMIT)
        except OSError as err:
            raise TpuctlError(f"cannot read timeline {path}: {err.strerror or err.__class__.__name__}", exit_code=FAILED) from None
    if read.empty:
        raise TpuctlError(f"nothing readable in {path} ({read.skipped} line(s) that are not timeline events)", exit_code=FAILED)
    return read


def now_of(read: compact.Compact) -> float:
    """The present on the timeline's clock: its last event plus the wall clock's advance since (a run still going)."""
    return min(read.high + max(0.0, time.time() - read.last_wall), _CLOCK_LIMIT)


@dataclass
class _NodeSpans:
    """The spans a run's own TPU VM took (timeline.NODE_EVENTS): getting it (the stocked-out tries first), and getting it
    back after each preemption. A begin with no end runs to the next attempt's start, else to the run's end."""

    hunting: list[tuple[float, float]]
    provisioning: list[tuple[float, float]]
    recovery: list[tuple[float, float]]

    @classmethod
    def of(cls, events: Sequence[tl.Event], attempts: Sequence[_Attempt], end: float) -> _NodeSpans:
        starts = sorted(attempt.start for attempt in attempts)
        hunting: list[tuple[float, float]] = []
        provisioning: list[tuple[float, float]] = []
        recovery: list[tuple[float, float]] = []
        for begin_name, end_name, into in ((tl.PROVISION_BEGIN, tl.PROVISION_END, provisioning), (tl.RECREATE_BEGIN, tl.RECREATE_END, recovery)):
            opened: tl.Event | None = None
            for e in events:
                if e.event == begin_name and opened is None:
                    opened = e
                elif e.event == end_name and opened is not None:
                    into.append((opened.t, e.t))
                    if into is provisioning:
                        hunted = max(0.0, compact.number(e.fields.get("hunting_s")) or 0.0)
                        hunting.append((opened.t, min(e.t, opened.t + hunted)))
                    opened = None
            if opened is not None:
                later = [t for t in starts if t > opened.t]
                into.append((opened.t, later[0] if later else end))
        return cls(sorted(hunting), sorted(provisioning), sorted(recovery))

    def cuts(self) -> list[float]:
        return [t for span in (*self.hunting, *self.provisioning, *self.recovery) for t in span]

    def category(self, t: float) -> str | None:
        if _within(self.hunting, t):
            return HUNTING
        if _within(self.provisioning, t):
            return PROVISIONING
        return RECOVERY if _within(self.recovery, t) else None


@dataclass
class _Attempt:
    """One attempt's moments, on the timeline's clock; `end`s rise with the attempt number (a point belongs to one attempt)."""

    number: int
    start: float
    end: float
    ready: float | None = None  # every worker's runtime ready
    first_step: float | None = None
    caught_up: float | None = None  # the first step past what earlier attempts reached (lost work ends)
    last_step: float | None = None
    hang_from: float | None = None  # the last progress before a hang was stopped
    saves: list[tuple[float, float]] = field(default_factory=list)  # merged, sorted
    restores: list[tuple[float, float]] = field(default_factory=list)
    evaluations: list[tuple[float, float]] = field(default_factory=list)  # fit's validation
    unended: bool = False  # the last attempt of a run with no run_end (going on, or killed): it may be tracing its first step
    redoing: bool = False  # a later attempt that never passed what an earlier one reached: all its steps are re-done
    ended: Kind | None = None

    def cuts(self) -> list[float]:
        moments = [self.start, self.end, self.ready, self.first_step, self.caught_up, self.last_step, self.hang_from]
        found = [t for t in moments if t is not None]
        for a, b in (*self.saves, *self.restores, *self.evaluations):
            found += (a, b)
        return found

    def category(self, t: float, *, restarted: bool) -> str:
        """The one category of moment `t`, a moment before this attempt's end (and after the previous one's)."""
        if t < self.start:
            return RESTART if restarted else OTHER  # between attempts, or queueing before the first
        if self.hang_from is not None and t >= self.hang_from:
            return HANG
        if _within(self.saves, t):
            return SAVE
        if _within(self.restores, t):
            return RESTORE
        if _within(self.evaluations, t):
            return EVALUATION
        if self.first_step is None or t < self.first_step:
            if restarted:
                return RESTART  # a failed attempt's end -> the next one's first step, start-up and tracing included
            if self.ready is None or t < self.ready:
                return START_UP
            return FIRST_STEP if self.first_step is not None or self.unended else OTHER  # no step ever: nothing says it traced
        if self.last_step is None or t >= self.last_step:
            return OTHER
        if self.redoing or (self.caught_up is not None and t < self.caught_up):
            return LOST_WORK
        return TRAINING


def _attempts(read: compact.Compact, begin: float, end: float) -> list[_Attempt]:
    by_number: dict[int, list[tl.Event]] = {}
    for e in read.events:
        if e.attempt is not None:
            by_number.setdefault(e.attempt, []).append(e)
    samples = {number: found for number, found in read.samples.items() if number is not None and len(found.t)}
    numbers = sorted(by_number.keys() | samples.keys())
    earliest = {n: min(by_number[n][0].t if n in by_number else math.inf, min(samples[n].t) if n in samples else math.inf) for n in numbers}
    next_start = [end] * len(numbers)  # where an attempt with no attempt_end ended: the first event of a later one
    for index in range(len(numbers) - 2, -1, -1):
        next_start[index] = min(next_start[index + 1], earliest[numbers[index + 1]])
    found: list[_Attempt] = []
    reached: float | None = None  # the highest step any earlier attempt reached
    previous_end = begin
    for number, later in zip(numbers, next_start, strict=True):
        own = by_number.get(number, [])
        steps = samples.get(number)
        starts = [e.t for e in own if e.event == tl.ATTEMPT_START]
        ends = [e.t for e in own if e.event == tl.ATTEMPT_END]
        start = _clamp(starts[0] if starts else (begin if not found else earliest[number]), begin, end)
        finish = max(_clamp(ends[-1] if ends else later, begin, end), start, previous_end)
        attempt = _Attempt(number, start, finish)
        readies = [e.t for e in own if e.event == tl.RUNTIME_READY]
        attempt.ready = max(readies) if readies else None
        if steps is not None:
            attempt.first_step = steps.first_mark if math.isfinite(steps.first_mark) else min(steps.t)
            attempt.last_step = max(max(steps.t), attempt.first_step)
            if reached is not None:
                attempt.caught_up = _passing(steps, reached)
                attempt.redoing = attempt.caught_up is None
            highest = max((step for step in steps.step if step == step), default=None)
            if highest is not None:
                reached = highest if reached is None else max(reached, highest)
        attempt.hang_from = _hang_from(own, attempt, steps)
        attempt.saves = _spans(own, tl.SAVE_BEGIN, tl.SAVE_END, finish)
        attempt.restores = _spans(own, tl.RESTORE_BEGIN, tl.RESTORE_END, finish)
        attempt.evaluations = _spans(own, tl.EVAL_BEGIN, tl.EVAL_END, finish)
        kinds = {e.event for e in own}
        attempt.ended = next((name for name, event in _ENDINGS if event in kinds), None)
        found.append(attempt)
        previous_end = finish
    return found


def _passing(steps: compact.Samples, reached: float) -> float | None:
    """When an attempt's steps passed `reached`: steps are sampled (one every 30 s), so the moment is interpolated between
    the last sample at or below it and the first above it, at the pace between the two. None: it never did.

    Samples are ordered by (time, place in the file), as timeline.read's stable sort orders them; two passes over the
    arrays find the first sample above `reached` and the one just before it without sorting a million samples."""
    above_t, above_at = math.inf, -1
    for place, (t, step) in enumerate(zip(steps.t, steps.step, strict=True)):
        if step > reached and t < above_t:  # NaN is never above
            above_t, above_at = t, place
    if above_at < 0:
        return None
    before_t, before_at = -math.inf, -1
    for place, (t, step) in enumerate(zip(steps.t, steps.step, strict=True)):
        if step == step and (t < above_t or (t == above_t and place < above_at)) and t >= before_t:
            before_t, before_at = t, place
    if before_at < 0:
        return above_t
    step, step0 = steps.step[above_at], steps.step[before_at]
    share = (reached - step0) / (step - step0) if step > step0 else 1.0
    return _clamp(before_t + share * (above_t - before_t), before_t, above_t)


def _hang_from(own: Sequence[tl.Event], attempt: _Attempt, steps: compact.Samples | None) -> float | None:
    """The last progress before the attempt's hang: the hang event's `idle_s` before it, else its last step before it."""
    hangs = [e for e in own if e.event == tl.HANG]
    if not hangs:
        return None
    hang = hangs[0]
    idle = compact.number(hang.fields.get("idle_s"))
    before = max((t for t in (steps.t if steps is not None else ()) if t <= hang.t), default=hang.t)
    since = hang.t - idle if idle is not None and idle >= 0 else before
    return _clamp(since, attempt.start, attempt.end)


def _spans(own: Sequence[tl.Event], begin: str, end: str, limit: float) -> list[tuple[float, float]]:
    """The union of every worker's begin -> end spans; a begin with no end runs to `limit` (the attempt's end)."""
    open_at: dict[str | None, float] = {}
    spans = []
    for e in own:
        if e.event == begin:
            open_at.setdefault(e.worker, e.t)
        elif e.event == end and e.worker in open_at:
            spans.append((open_at.pop(e.worker), e.t))
    spans += [(t, limit) for t in open_at.values()]
    merged: list[tuple[float, float]] = []
    for a, b in sorted(spans):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def _within(spans: Sequence[tuple[float, float]], t: float) -> bool:
    index = bisect.bisect_right(spans, (t, math.inf)) - 1
    return index >= 0 and spans[index][0] <= t < spans[index][1]


def _clamp(value: float, low: float, high: float) -> float:
    return min(max(value, low), high)
