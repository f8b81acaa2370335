"""Run views for the TensorBoard tab's tests, made by the real producer: a run folder whose timeline tpuctl's own
Timeline writer wrote (tests/standins/timelines.py: attempts, steps, checkpoint saves, a preemption and its restart),
a profile verdict kept where `tpuctl profile` keeps it (view.keep_profile), a stacks view where `tpuctl stacks`
leaves it, then `tpuctl.runs.view.build`. `publish` puts a view (or a hostile file's bytes) where the launcher
does: MODEL_DIR/tpuctl/<run_id>/view.json.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.standins.timelines import PREEMPTION, WALL0, write_run
from tpuctl.profiling.verdict import StepTimes, Verdict, Worker
from tpuctl.runs import view
from tpuctl.runs.folder import RunFolder

SESSION = "2025_11_28_14_40_00"
STACKS = 'Thread 0x7f01 (most recent call first):\n  File "train.py", line 42 in <module>\n    model.fit(ds, epochs=10)\n'
HANG_AT = WALL0 + 1400.0  # inside the first attempt (write_run starts the run at WALL0 + 1000)


def _worker(name: str, mean_ms: float, input_pct: float) -> Worker:
    compute = 95.0 - input_pct
    return Worker(name, f"{name}.xplane.pb", 40, StepTimes(mean_ms, mean_ms / 20, mean_ms * 0.9, mean_ms * 1.2), input_pct, compute, 4.0, 1.0, (), True)


def built(
    log_dir: Path, *, model_dir: str, names: Sequence[str] = ("worker:0", "worker:1"), run_id: str = "20251128-142640-train-ab12",
    cause: str = PREEMPTION, profile_dir: str | None = None, stacks: str = STACKS,
) -> dict[str, Any]:
    """The view of a run of `names` preempted once (with `cause`), with a profile session and a hang report."""
    log_dir.mkdir(parents=True, exist_ok=True)
    write_run(log_dir, workers=len(names), samples=60, restarts=[30], save_every=10, names=names, run_id=run_id, cause=cause)
    folder = RunFolder(log_dir)
    workers = (_worker(names[0], 250.0, 12.5), _worker(names[-1], 340.0, 35.0))
    verdict = Verdict(SESSION, workers, straggler=names[-1], notes=(f"{names[-1]} is 36% slower than the median of the others",))
    view.keep_profile(folder, SESSION, profile_dir or model_dir, verdict.to_json())
    place = folder.attempt_dir(1) / "stacks-1"
    place.mkdir(parents=True)
    (place / "view.txt").write_text(stacks, encoding="utf-8")
    os.utime(place / "view.txt", (HANG_AT, HANG_AT))
    return view.build(folder, live=False, model_dir=model_dir)


def publish(model_dir: Path, shown: dict[str, Any] | bytes | str, run_id: str | None = None) -> Path:
    """Write `shown` (a view, or raw bytes/text for a hostile file) as MODEL_DIR/tpuctl/<run_id>/view.json."""
    if isinstance(shown, dict):
        run_id = run_id or shown["run"]["id"]
    folder = model_dir / "tpuctl" / str(run_id)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "view.json"
    data = json.dumps(shown) if isinstance(shown, dict) else shown
    if isinstance(data, str):
        path.write_text(data, encoding="utf-8")
    else:
        path.write_bytes(data)
    return path
