"""A run's worker output from its folder (`tpuctl logs`): every attempt in order, every worker's log, followed if asked.

The folder's layout is RunFolder's: `attempt-N/TYPE-INDEX[@HOST].log`, one file per worker
and attempt, written by every backend (the job engine saves each replica's lines the same
way). Workers come in the cluster's order (chief, workers, ps, evaluator, each by index),
which is the order of the plan, so a worker's position (and so its colour) is the one the
console gave it. A follower reads until the run's supervisor lets go of its folder
(RunFolder.is_running), then reads what is left and ends.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path

from tpuctl.cluster import tf_config as cluster
from tpuctl.inputs import parse as inputs
from tpuctl.inputs.errors import FAILED, USAGE, TpuctlError
from tpuctl.runs.folder import RunFolder
from tpuctl.runs.tailing import Refused, Tail

POLL_S = 0.25
LATE_S = 5.0  # how long an attempt's logs are still read once a newer attempt began (its pumps are joined for 2 s)
FOLLOW_BUDGET = 4 << 20  # bytes read from one log per visit while following: one fast writer cannot starve the rest


@dataclass(frozen=True)
class WorkerLog:
    attempt: int
    worker: str  # `worker:1`, `chief:0`; a file that names no task (a pod's name) goes by its stem
    host: str | None  # where workers run on several hosts, the host the file name gives
    position: int  # the worker's place in the cluster's order: the console's colour
    path: Path


@dataclass(frozen=True)
class NewAttempt:
    """Attempt `number` (2 or more) begins: a line between attempts."""

    number: int


@dataclass(frozen=True)
class Line:
    log: WorkerLog
    raw: bytes  # as the worker printed it, without its newline


def worker_name(text: str) -> str:
    """`--worker`: `N` is worker N (`worker:N`), `TYPE:N` a task of another type (`chief:0`, `ps:1`)."""
    inputs.check_text(text, "--worker")
    if ":" not in text:
        return f"worker:{inputs.whole_number(text, '--worker', digits=6, hint='a worker index such as 1, or TYPE:N such as chief:0')}"
    try:
        task = cluster.parse_task(text)
    except ValueError as err:
        raise TpuctlError(f"--worker {inputs.shown(text)}: {err}", hint="a worker index such as 1, or TYPE:N such as chief:0", exit_code=USAGE) from None
    return f"{task.type}:{task.index}"


def lines(
    folder: RunFolder, warn: Callable[[str], None], *, worker: str | None = None, follow: bool = False, idle: Callable[[], None] = lambda: None
) -> Iterator[NewAttempt | Line]:
    """The run's worker lines, attempt by attempt and worker by worker; with `follow`, as they come until the run ends,
    calling `idle` before each wait for more (the moment to flush what was written).

    A file that is no log (Refused) is passed over with one warning. TpuctlError (exit 1) when
    `worker` printed nothing in any attempt."""
    tails: dict[Path, Tail] = {}
    done: set[Path] = set()
    seen_attempts: set[int] = set()
    superseded: dict[int, float] = {}  # attempt -> when a newer one was first seen
    closed: set[int] = set()
    others: dict[str, None] = {}  # every worker with a log, in order: named when `worker` has none
    found = False
    try:
        while True:
            running = follow and folder.is_running()  # asked before the pass: the pass after the end reads the rest
            more = False
            numbers = attempts(folder)
            for number in numbers:
                if number in closed:
                    continue
                if number not in seen_attempts:
                    seen_attempts.add(number)
                    if number > 1:
                        yield NewAttempt(number)
                if number != numbers[-1]:
                    superseded.setdefault(number, time.monotonic())
                # An older attempt's workers have ended; what a slow pump still had is given LATE_S to land.
                finished = not running or time.monotonic() - superseded.get(number, math.inf) >= LATE_S
                logs = worker_logs(folder, number)
                for log in logs:
                    others.setdefault(log.worker)
                    if (worker is not None and log.worker != worker) or log.path in done:
                        continue
                    found = True
                    tail = tails.setdefault(log.path, Tail(log.path))
                    kept = yield from _read(tail, log, finished, FOLLOW_BUDGET if running else None, warn)
                    more = more or not tail.at_end
                    if not kept or (finished and tail.at_end):
                        tail.close()
                        done.add(log.path)
                        del tails[log.path]
                if finished and not any(log.path in tails for log in logs):
                    closed.add(number)  # every log of it read to its end: not listed again
            if not running:
                break
            if not more:
                idle()
                time.sleep(POLL_S)
    finally:
        for tail in tails.values():
            tail.close()
    if worker is not None and not found:
        workers = ", ".join(others) or "none yet"
        raise TpuctlError(f"{worker} has no log in {folder.path}", hint=f"the workers with one: {workers}", exit_code=FAILED)


def _read(tail: Tail, log: WorkerLog, final: bool, budget: int | None, warn: Callable[[str], None]) -> Generator[Line, None, bool]:
    """One visit to one log; False for a file refused (one warning), left alone from then on."""
    try:
        for raw in tail.lines(final=final, budget=budget):
            yield Line(log, raw)
    except Refused as why:
        warn(f"warning: passed over {log.path}: {why}")
        return False
    return True


def attempts(folder: RunFolder) -> list[int]:
    """The numbers of the run's attempt folders, in order."""
    found = []
    for entry in _entries(folder.path):
        number = RunFolder.attempt_of(entry.name)
        if number is not None and entry.is_dir(follow_symlinks=False):
            found.append(number)
    return sorted(found)


def worker_logs(folder: RunFolder, attempt: int) -> list[WorkerLog]:
    """An attempt's worker logs in the cluster's order, each with its position in it."""
    keyed = []
    for entry in _entries(folder.attempt_dir(attempt)):
        if not entry.name.endswith(".log") or entry.is_dir(follow_symlinks=False):
            continue
        parsed = RunFolder.worker_log_of(entry.name)
        if parsed is not None and parsed[0] in cluster.ROLES:
            role, index, host = parsed
            keyed.append(((cluster.ROLES.index(role), index, host or "", entry.name), f"{role}:{index}", host, entry.path))
        else:
            keyed.append(((len(cluster.ROLES), 0, "", entry.name), entry.name.removesuffix(".log"), None, entry.path))
    keyed.sort(key=lambda item: item[0])
    return [WorkerLog(attempt, name, host, position, Path(path)) for position, (_, name, host, path) in enumerate(keyed)]


def _entries(path: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(path) as found:
            return list(found)
    except OSError:
        return []
