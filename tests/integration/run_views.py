"""Run views for the TensorBoard plugin's tests, written by hand to the contract (docs/report.md, "In TensorBoard";
/work/notes/view-contract.md) until `tpuctl.runs.view.build` is merged: a two-worker run preempted once, with its
segments, step-rate bands, restart, goodput (the report's object: categories, attempts), goodput over time, a
profile session with its verdict and a hang report. `publish` puts one where the launcher does,
MODEL_DIR/tpuctl/<run_id>/view.json.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SCHEMA = "tpuctl.run-view/1"
T0 = 1764340000.0  # 2025-11-28 14:26:40 UTC


def _row(attempt: int, worker: str, start: float, end: float, *, ending: dict[str, Any]) -> dict[str, Any]:
    first, steps = start + 40, start + 55
    save = steps + (end - steps) / 2
    segments = [
        {"kind": "start-up", "start": start, "end": first},
        {"kind": "first-step", "start": first, "end": steps},
        {"kind": "steps", "start": steps, "end": save},
        {"kind": "checkpoint-save", "start": save, "end": save + 12},
        {"kind": "steps", "start": save + 12, "end": end},
    ]
    bin_s = (end - steps) / 30
    rates = [None if i in (15,) else round(4.0 + (i % 5) * 0.3, 2) for i in range(30)]
    return {"attempt": attempt, "worker": worker, "segments": segments, "rate": {"start": steps, "bin_s": bin_s, "steps_per_s": rates}, "ending": ending}


def view(
    run_id: str = "20251128-142640-train-ab12",
    *,
    workers: list[str] | None = None,
    words: str = "worker:1 was preempted (SIGTERM from the TPU maintenance event)",
    profile_dir: str | None = None,
    session: str = "2025_11_28_14_40_00",
    stacks: str = 'Thread 0x7f (most recent call first):\n  File "train.py", line 42 in <module>\n    model.fit(ds)',
) -> dict[str, Any]:
    """A run of `workers` (default worker:0, worker:1): attempt 1 preempted at +600 s, attempt 2 succeeded at +1500 s."""
    names = workers or ["worker:0", "worker:1"]
    cut, end = T0 + 600, T0 + 1500
    preempted = {"state": "preempted", "words": words}
    rows = [_row(1, name, T0, cut, ending={**preempted, "at": cut}) for name in names]
    rows += [_row(2, name, cut + 5, end, ending={"state": "succeeded", "words": "exit status 0", "at": end}) for name in names]
    categories = {"training steps": 1100.0, "start-up": 180.0, "first step": 60.0, "checkpoint save": 48.0, "checkpoint restore": 0.0,
                  "lost work": 90.0, "restart": 5.0, "hang": 0.0, "other": 17.0}
    first = {"training steps": 450.0, "start-up": 80.0, "first step": 30.0, "checkpoint save": 24.0, "checkpoint restore": 0.0,
             "lost work": 90.0, "restart": 0.0, "hang": 0.0, "other": 0.0}
    second = {name: categories[name] - first[name] for name in categories}
    second["restart"], second["other"] = 0.0, 22.0
    return {
        "schema": SCHEMA,
        "written": end + 1,
        "run": {"id": run_id, "script": "train.py", "backend": "local", "state": "succeeded", "start": T0, "end": end, "workers": len(names),
                "model_dir": profile_dir or "model"},
        "attempts": [
            {"attempt": 1, "start": T0, "end": cut, "ending": {"state": "preempted", "words": words}},
            {"attempt": 2, "start": cut + 5, "end": end, "ending": {"state": "succeeded", "words": "exit status 0"}},
        ],
        "rows": rows,
        "restarts": [{"at": cut, "attempt": 2, "cause": "preempted", "words": words}],
        "goodput": {
            "wall_s": 1500.0, "goodput": round(1100 / 1500, 4), "categories": categories, "step_source": "keras", "finished": True,
            "attempts": [
                {"attempt": 1, "ended": "preempted", "wall_s": 674.0, "goodput": round(450 / 674, 4), "categories": first},
                {"attempt": 2, "ended": None, "wall_s": 826.0, "goodput": round(650 / 826, 4), "categories": second},
            ],
            "skipped_lines": 0,
        },
        "goodput_over_time": [{"start": T0 + i * 150, "end": T0 + (i + 1) * 150, "goodput": round(0.5 + 0.04 * i, 3)} for i in range(10)],
        "profiles": [{
            "session": session, "at": T0 + 900, "dir": profile_dir,
            "verdict": {
                "session": session,
                "workers": [
                    {"worker": names[0], "file": "a.xplane.pb", "steps": 40, "step_ms": {"mean": 250.0, "stdev": 12.0, "min": 230.0, "max": 290.0},
                     "input_pct": 12.5, "compute_pct": 70.0, "communication_pct": 15.0, "other_pct": 2.5, "top_ops": [], "markers": True},
                    {"worker": names[-1], "file": "b.xplane.pb", "steps": 40, "step_ms": {"mean": 340.0, "stdev": 20.0, "min": 300.0, "max": 400.0},
                     "input_pct": 35.0, "compute_pct": 50.0, "communication_pct": 12.0, "other_pct": 3.0, "top_ops": [], "markers": True},
                ],
                "straggler": names[-1], "notes": [f"{names[-1]} is slower than the others by 36%"], "unreadable": [],
            },
        }],
        "hangs": [{"at": T0 + 300, "attempt": 1, "summary": f"{names[0]} waits in a collective: {words}", "stacks": stacks}],
    }


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
