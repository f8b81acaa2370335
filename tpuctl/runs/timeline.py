"""A run's timeline: what happened when, one JSON object a line in LOG_DIR/timeline.jsonl, written as it happens.

Every line has `t` (seconds on the launcher's monotonic clock, for durations), `wall`
(seconds since the epoch, for people), `event` (one of the names below) and, where it
applies, `attempt`, `worker` (`worker:0`) and the event's own fields. Lines are appended
and flushed one at a time, so a run killed by SIGKILL keeps every event up to its death.

Who writes what:
    launch core        run_start (run_id, backend, the script's file name), run_end
    a run's own VM     provision_begin (types, candidates), node_create (node, zone, type, capacity: a try the service
    (--new-tpu)        accepted), provision_end (node, zone, hunting_s: the stocked-out tries' share, tried, capacity,
                       price_per_hour: the VM's list price), recreate_begin (node, zone, condition), recreate_end (node,
                       zone, capacity, price_per_hour), node_delete (node, zone, fate: deleted or kept)
    process engine     attempt_start, worker_start, runtime_ready, failure, preempted, hang, restart, attempt_end
    the ssh backend    environment_begin / environment_end (step: packages, setup; built: hosts built or set up,
                       seconds), before the attempt's attempt_start: the hosts' environment (--requirements, --setup)
    job engine         job_state (a cluster's job: submitted, running, ...)
    a worker's runtime first_step, step, checkpoint_save_begin/_end, checkpoint_restore_begin/_end,
                       evaluation_begin/_end (fit's validation); sent on the
                       worker's control channel as `timeline {json}` and stamped by the launcher on arrival
    the model dir      step (source "summary"), where the runtime sees no steps of its own

Steps are sampled, never one line per step: a week-long run's file stays small (STEP_EVERY_S).
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tpuctl.inputs.parse import json_within
from tpuctl.inputs.private_files import PRIVATE_FILE

RUN_START, RUN_END = "run_start", "run_end"
ATTEMPT_START, ATTEMPT_END = "attempt_start", "attempt_end"
WORKER_START, RUNTIME_READY = "worker_start", "runtime_ready"
FIRST_STEP, STEP = "first_step", "step"
SAVE_BEGIN, SAVE_END = "checkpoint_save_begin", "checkpoint_save_end"
RESTORE_BEGIN, RESTORE_END = "checkpoint_restore_begin", "checkpoint_restore_end"
EVAL_BEGIN, EVAL_END = "evaluation_begin", "evaluation_end"
FAILURE, PREEMPTED, HANG, RESTART = "failure", "preempted", "hang", "restart"
JOB_STATE = "job_state"
# A run's own TPU VM (`launch --new-tpu`): hunted and created before the first attempt, recreated between two attempts
# after a preemption, deleted (or kept) after the last. Run-level events: no attempt, no worker.
PROVISION_BEGIN, NODE_CREATE, PROVISION_END = "provision_begin", "node_create", "provision_end"
RECREATE_BEGIN, RECREATE_END, NODE_DELETE = "recreate_begin", "recreate_end", "node_delete"
NODE_EVENTS = frozenset({PROVISION_BEGIN, NODE_CREATE, PROVISION_END, RECREATE_BEGIN, RECREATE_END, NODE_DELETE})
# The hosts' environment (ssh launches with --requirements or --setup): before each attempt's workers start, the
# packages looked for and built where missing (step "packages"), then --setup where it has not run (step "setup").
ENV_BEGIN, ENV_END = "environment_begin", "environment_end"
EVENTS = frozenset(
    {RUN_START, RUN_END, ATTEMPT_START, ATTEMPT_END, WORKER_START, RUNTIME_READY, FIRST_STEP, STEP, SAVE_BEGIN, SAVE_END}
    | {RESTORE_BEGIN, RESTORE_END, EVAL_BEGIN, EVAL_END, FAILURE, PREEMPTED, HANG, RESTART, JOB_STATE, ENV_BEGIN, ENV_END}
    | NODE_EVENTS
)
# What a worker may say on its control channel (the rest is the launcher's to say).
FROM_WORKERS = frozenset({FIRST_STEP, STEP, SAVE_BEGIN, SAVE_END, RESTORE_BEGIN, RESTORE_END, EVAL_BEGIN, EVAL_END})
STEP_EVERY_S = 30.0  # at most one step line per worker this often (and the last step of every attempt)
MESSAGE_PREFIX = "timeline "  # a worker's line on its control channel
LINE_LIMIT = 4096  # a longer line is not one of ours


@dataclass(frozen=True)
class Event:
    t: float
    wall: float
    event: str
    attempt: int | None = None
    worker: str | None = None
    fields: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        line: dict[str, Any] = {"t": round(self.t, 3), "wall": round(self.wall, 3), "event": self.event}
        if self.attempt is not None:
            line["attempt"] = self.attempt
        if self.worker is not None:
            line["worker"] = self.worker
        return {**self.fields, **line}


class Timeline:
    """The writer: thread-safe (every watcher thread of an attempt writes), appending, each line flushed.

    A timeline that cannot be written (a full disk) is given up after one warning: it is a view, never the run.
    Steps are sampled here, per worker: the first of an attempt, then one every STEP_EVERY_S, and the last one
    seen is written when its attempt ends (`flush_steps`)."""

    def __init__(self, path: Path, warn: Any = None, clock: Callable[[], tuple[float, float]] | None = None) -> None:
        self.path = path
        self._warn = warn
        self._clock = clock or _now  # (monotonic, wall): a benchmark writes a week in seconds with its own
        self._listeners: list[Callable[[str], None]] = []
        self._lock = threading.Lock()
        self._file: Any = None
        self._broken = False
        # Per (attempt, worker): when a step line was last written, the newest step's fields, whether it was written, and
        # when it came (t, wall): a step written only at its attempt's end keeps the time it was reached.
        self._last_step: dict[tuple[int | None, str | None], tuple[float, dict[str, Any], bool, float, float]] = {}

    def event(self, name: str, *, attempt: int | None = None, worker: str | None = None, **fields: Any) -> None:
        now, wall = self._clock()
        if name == STEP:
            key = (attempt, worker)
            with self._lock:
                last = self._last_step.get(key)
                due = last is None or now - last[0] >= STEP_EVERY_S
                self._last_step[key] = (now if due else last[0], {**fields}, due, now, wall)  # type: ignore[index]
            if not due:
                return
        self._write(Event(now, wall, name, attempt, worker, fields))

    def flush_steps(self, attempt: int | None) -> None:
        """Write the last step each worker of `attempt` reached, where sampling left it out."""
        with self._lock:
            pending = [(key, entry) for key, entry in self._last_step.items() if key[0] == attempt and not entry[2]]
            for key, _ in pending:
                del self._last_step[key]
        for (attempt_, worker), (_, fields, _, t, wall) in pending:
            self._write(Event(t, wall, STEP, attempt_, worker, fields))

    def from_worker(self, message: str, *, attempt: int, worker: str) -> bool:
        """A worker's `timeline {json}` line, stamped now; False for any other message. What is not a worker's
        event (worker_event) is dropped: a worker cannot write the launcher's."""
        if not message.startswith(MESSAGE_PREFIX):
            return False
        raw = worker_event(message)
        if raw is not None:
            extra = {k: v for k, v in raw.items() if k not in ("event", "t", "wall", "attempt", "worker") and _plain(v)}
            self.event(str(raw["event"]), attempt=attempt, worker=worker, **extra)
        return True

    def listen(self, listener: Callable[[str], None]) -> None:
        """Call `listener(event name)` after each line written (the view's publisher wakes at an attempt's end).
        It runs on the writing thread, so it must only signal; what it raises is its own loss, never the writer's."""
        self._listeners.append(listener)

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def _write(self, event: Event) -> None:
        line = json.dumps(event.to_json(), allow_nan=False) + "\n"
        with self._lock:
            if self._broken:
                return
            try:
                if self._file is None:
                    fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, PRIVATE_FILE)
                    self._file = os.fdopen(fd, "a", encoding="utf-8", buffering=1)
                self._file.write(line)
            except (OSError, ValueError) as err:
                self._broken = True
                if self._warn is not None:
                    self._warn(f"warning: cannot write the run's timeline {self.path}: {getattr(err, 'strerror', None) or err}")
                return
        for listener in self._listeners:
            try:
                listener(event.event)
            except Exception:  # noqa: BLE001 - a listener's failure is never the timeline's
                continue


@dataclass(frozen=True)
class Reading:
    events: list[Event]
    skipped: int  # lines that were not events (truncated, garbage)


def read(lines: Iterable[str]) -> Reading:
    """The events of a timeline's lines, in time order; what is not an event is counted, never raised."""
    events = []
    skipped = 0
    for text in lines:
        event = parse_line(text) if len(text) <= LINE_LIMIT else None
        if event is None:
            skipped += bool(text.strip())
        else:
            events.append(event)
    events.sort(key=lambda e: e.t)  # stable: same-time events keep their order
    return Reading(events, skipped)


def worker_event(message: str) -> dict[str, Any] | None:
    """The event of a worker's `timeline {json}` message, or None where it is none of a worker's: a name of the
    launcher's, a line too long, no JSON, JSON nested deeper than any event (json.loads would recurse to a
    RecursionError on the launcher's message reader, which would end it)."""
    if not message.startswith(MESSAGE_PREFIX) or len(message) > LINE_LIMIT:
        return None
    try:
        raw = json_within(message[len(MESSAGE_PREFIX) :])
    except ValueError:
        return None
    return raw if isinstance(raw, dict) and raw.get("event") in FROM_WORKERS else None


def parse_line(text: str) -> Event | None:
    """The event a timeline's line holds, or None: not JSON (or JSON nested deeper than any event), not an event."""
    try:
        raw = json_within(text)
    except ValueError:
        return None
    if not isinstance(raw, dict) or raw.get("event") not in EVENTS:
        return None
    t, wall = raw.get("t"), raw.get("wall")
    if not all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in (t, wall)):
        return None
    attempt, worker = raw.get("attempt"), raw.get("worker")
    if attempt is not None and (not isinstance(attempt, int) or isinstance(attempt, bool) or not 0 < attempt < 1_000_000):
        return None
    if worker is not None and (not isinstance(worker, str) or len(worker) > 200):
        return None
    extra = {k: v for k, v in raw.items() if k not in ("t", "wall", "event", "attempt", "worker")}
    return Event(float(t), float(wall), str(raw["event"]), attempt, worker, extra)  # type: ignore[arg-type]


def _now() -> tuple[float, float]:
    return time.monotonic(), time.time()


def _plain(value: object) -> bool:
    return value is None or isinstance(value, bool | int | str) or (isinstance(value, float) and math.isfinite(value))
