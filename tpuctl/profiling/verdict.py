"""What a captured profile says, per worker and across them, read from xprof's numbers (tpuctl/profiling/convert.py).

The converter runs in a child process under a deadline: it is C++ that may crash on a bad file, and the CLI must
still print a verdict for the other workers. A crash costs only the file it was converting: the rest are converted
again in a fresh process.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tpuctl.endings import exit_words
from tpuctl.inputs.errors import one_line
from tpuctl.safety import reaper

CONVERT_TIMEOUT_S = 300.0  # all files together; one 25 MB worker file takes ~1-3 s on a busy 2-core machine
STRAGGLER_MARGIN = 0.15  # slower than the median of the other workers' mean step times by more than this
INSTALL_HINT = "pip install 'tpuctl[profile]'"
MARKERS_HINT = (
    "Keras fit under tpuctl gets step markers from the runtime; a custom loop wraps each step in "
    'tf.profiler.experimental.Trace("train", step_num=step, _r=1) (TensorFlow) or '
    'jax.profiler.StepTraceAnnotation("train", step_num=step) (JAX)'
)
UNCLASSIFIED = (
    "xprof put none of its ops in its op statistics (as for a JAX program on CPU), and counts its steps' time as compute: "
    "how much of that is communication (a cross-process all-reduce) is unknown, so no bound is named"
)
COLLECTIVE_BOUND_PCT = 30.0  # xprof's kCollectiveBoundThresholdInPercent
COMMUNICATION_HINT = (
    "most of each step is gradient synchronisation (all-reduce); a collective also waits for the slowest worker. "
    "What helps: a larger per-replica batch, or a custom loop that accumulates gradients over several batches (fewer all-reduces per "
    "example); a faster input pipeline or more compute does not"
)
_MISSING_EXIT = 3  # convert.py's status when xprof cannot be imported (the converter is not imported here)
_SUFFIX = ".xplane.pb"


@dataclass(frozen=True)
class StepTimes:
    mean: float
    stdev: float
    min: float
    max: float


@dataclass(frozen=True)
class Op:
    type: str
    name: str
    self_pct: float


@dataclass(frozen=True)
class Worker:
    """One worker's numbers; step_ms and the shares are None where its file has no step markers."""

    worker: str
    file: str
    steps: int
    step_ms: StepTimes | None
    input_pct: float | None
    compute_pct: float | None
    communication_pct: float | None  # collectives (all-reduce, gather, send/recv), apart from compute as xprof keeps them; None: unknown
    other_pct: float | None
    top_ops: tuple[Op, ...]
    markers: bool


@dataclass(frozen=True)
class Unreadable:
    worker: str
    file: str
    reason: str


@dataclass(frozen=True)
class Verdict:
    session: str | None
    workers: tuple[Worker, ...] = ()
    straggler: str | None = None
    notes: tuple[str, ...] = ()
    unreadable: tuple[Unreadable, ...] = field(default=())

    def lines(self) -> list[str]:
        """The terminal text: a line per worker and one of its top ops, then the straggler and the notes."""
        shown: list[str] = []
        width = max((len(w.worker) for w in self.workers), default=0)
        for w in self.workers:
            shown.append(f"{w.worker:<{width}}  {_summary(w)}")
            if w.top_ops:
                shown.append(f"{'':<{width}}  top ops: " + ", ".join(_op(op) for op in w.top_ops))
        return shown + list(self.notes)

    def to_json(self) -> dict[str, Any]:
        return {
            "session": self.session,
            "workers": [{**asdict(w), "top_ops": [asdict(op) for op in w.top_ops]} for w in self.workers],
            "straggler": self.straggler,
            "notes": list(self.notes),
            "unreadable": [asdict(u) for u in self.unreadable],
        }


def worker_name(file: Path, names: Mapping[str, str] | None = None) -> str:
    """`host_port` from TensorFlow's `<host>_<port>.xplane.pb`, or the worker it names in `names` (e.g. "worker:1")."""
    stem = file.name.removesuffix(_SUFFIX)
    return (names or {}).get(stem, stem)


def verdict(files: Sequence[Path], *, names: Mapping[str, str] | None = None, timeout: float = CONVERT_TIMEOUT_S) -> Verdict:
    """The verdict on one capture's worker files; `names` maps a file's `host_port` to the worker it was."""
    parents = {f.parent.name for f in files}
    session = parents.pop() if len(parents) == 1 else None
    found = _convert(list(files), timeout)
    if found is None:
        hint = f"no verdict: xprof is not installed for {sys.executable}: {INSTALL_HINT} (or pip install xprof into that interpreter)"
        return Verdict(session, notes=(hint,))
    workers: list[Worker] = []
    unreadable: list[Unreadable] = []
    for file in sorted(files, key=lambda f: _in_order(worker_name(f, names))):
        numbers = found[str(file)]
        name = worker_name(file, names)
        if "error" in numbers:
            unreadable.append(Unreadable(name, str(file), one_line(str(numbers["error"]))))
        else:
            workers.append(_worker(name, numbers))
    straggler, said = _straggler(workers)
    said += _communication_note(workers)
    notes = [f"{u.worker}: not judged: {file_name(u.file)} {u.reason}" for u in unreadable]
    notes += [
        f"{w.worker}: no step markers in {file_name(w.file)}, so no step time (or the capture was shorter than one step). {MARKERS_HINT}."
        for w in workers
        if not w.markers
    ]
    notes += [f"{w.worker}: {UNCLASSIFIED}." for w in workers if w.step_ms is not None and w.communication_pct is None]
    return Verdict(session, tuple(workers), straggler, tuple(said + notes), tuple(unreadable))


def _in_order(name: str) -> list[tuple[int, str]]:
    """worker:2 before worker:10: numbers compare as numbers."""
    return [(int(part), "") if part.isdigit() else (-1, part) for part in re.split(r"(\d+)", name)]


def file_name(path: str) -> str:
    return Path(path).name


def _convert(files: list[Path], timeout: float) -> dict[str, dict[str, Any]] | None:
    """convert.py's line for every file (an "error" one where it crashed or ran out of time); None without xprof."""
    found: dict[str, dict[str, Any]] = {}
    pending = [str(f) for f in files]
    deadline = time.monotonic() + timeout
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    while pending:
        argv = [sys.executable, "-m", "tpuctl.profiling.convert", *pending]
        try:
            done = reaper.run(argv, timeout=max(1.0, deadline - time.monotonic()), capture_output=True, env=env)
            out, status = done.stdout, done.returncode
        except subprocess.TimeoutExpired as exc:
            out, status = exc.stdout or b"", None
        lines = [json.loads(line) for line in out.decode(errors="replace").splitlines() if line.startswith("{")]
        if status == _MISSING_EXIT and lines and "missing" in lines[0]:
            return None
        for line in lines:
            found[line["file"]] = line
        pending = [f for f in pending if f not in found]
        if pending and status is None:
            late = f"was not converted: xprof took over {timeout:g} s for this capture"
            found |= {f: {"file": f, "error": late} for f in pending}
        elif pending and status is not None:  # the converter died on the first file it did not answer for
            found[pending[0]] = {"file": pending[0], "error": f"crashed xprof's converter ({exit_words(status)})"}
        pending = [f for f in pending if f not in found]
    return found


def _worker(name: str, n: dict[str, Any]) -> Worker:
    step_ms = n.get("step_ms")
    return Worker(
        worker=name,
        file=n["file"],
        steps=int(n["steps"]),
        step_ms=StepTimes(**step_ms) if step_ms else None,
        input_pct=n.get("input_pct"),
        compute_pct=n.get("compute_pct"),
        communication_pct=n.get("communication_pct"),
        other_pct=n.get("other_pct"),
        top_ops=tuple(Op(str(o["type"]), str(o["name"]), float(o["self_pct"])) for o in n["top_ops"]),
        markers=bool(n["markers"]),
    )


def _straggler(workers: list[Worker]) -> tuple[str | None, list[str]]:
    """The worker whose mean step time is furthest over the median of the others', when that is past the margin."""
    means = [(w, w.step_ms.mean) for w in workers if w.step_ms]
    if len(means) < 2:
        return None, []
    over = [(mean / statistics.median(m for o, m in means if o is not w), w, mean) for w, mean in means]
    ratio, slowest, mean = max(over, key=lambda t: t[0])
    if ratio <= 1 + STRAGGLER_MARGIN:
        return None, [f"no straggler: no worker's mean step time is more than {STRAGGLER_MARGIN:.0%} over the others' median"]
    others = statistics.median(m for o, m in means if o is not slowest)
    said = f"straggler: {slowest.worker}, mean step {mean:.1f} ms vs {others:.1f} ms for the others (median), {ratio:.1f}x"
    bound, share = _bound(slowest)
    return slowest.worker, [said + (f"; it is {bound} ({share})" if bound else "")]


def _bound(w: Worker) -> tuple[str, str]:
    """What limits the worker's steps, and the share that says so. Communication past xprof's own collective-bound
    threshold (30%, smart_suggestion/constants.h) is named even where compute is the larger part."""
    if w.input_pct is None or w.compute_pct is None or w.other_pct is None:
        return "", ""
    if w.communication_pct is None:  # UNCLASSIFIED: compute may be mostly collectives; only input is xprof's own word
        return ("input-bound", f"{w.input_pct:.0f}% of its step time waits for input") if w.input_pct >= 50 else ("", "")
    waits = f"{w.input_pct:.0f}% of its step time waits for input"
    talks = f"{w.communication_pct or 0:.0f}% of its step time is in collectives"
    if w.input_pct >= 50:
        return "input-bound", waits
    if (w.communication_pct or 0) >= 50:
        return "communication-bound", talks
    if w.input_pct >= 20:
        return "partly input-bound", waits
    if (w.communication_pct or 0) >= COLLECTIVE_BOUND_PCT:
        return "partly communication-bound", talks
    if w.compute_pct >= 50:
        return "compute-bound", f"{w.compute_pct:.0f}% of its step time computes"
    if w.other_pct >= 50:
        return "neither computing nor reading input", f"{w.other_pct:.0f}%: Python between steps, I/O"
    return "", ""


def _communication_note(workers: list[Worker]) -> list[str]:
    """What helps workers whose steps are mostly collectives: fewer synchronisations per example, not faster
    compute or input (a collective also waits for the slowest worker, so a straggler is looked at first)."""
    bound = [w.worker for w in workers if _bound(w)[0].endswith("communication-bound")]
    if not bound:
        return []
    return [f"{', '.join(bound)}: {COMMUNICATION_HINT}"]


def _summary(w: Worker) -> str:
    if w.step_ms is None:
        return "no step markers, so no step time (see below)"
    s = w.step_ms
    talks = "unknown" if w.communication_pct is None else f"{w.communication_pct:.0f}%"
    shares = f"input {w.input_pct:.0f}%  compute {w.compute_pct:.0f}%  communication {talks}  other {w.other_pct:.0f}%"
    bound = _bound(w)[0]
    return f"{w.steps} steps  step {s.mean:.1f} ms ±{s.stdev:.1f} ({s.min:.1f}-{s.max:.1f})  {shares}" + (f"  {bound}" if bound else "")


def _op(op: Op) -> str:
    """`type share`, with the op's name where it says more than its type (its last two parts, cut short)."""
    tail = "/".join(op.name.split("/")[-2:]) if "/" in op.name else "::".join(op.name.split("::")[-2:])
    named = f" {one_line(tail, 48)}" if op.name != op.type else ""
    return f"{one_line(op.type, 40)}{named} {op.self_pct:.1f}%"
