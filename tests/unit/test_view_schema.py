"""runs/view_schema.py: the run view's one schema. A view runs/view.py writes, with every part a run can give it, passes
the TensorBoard tab's checker whole: a field the writer adds and the checker does not know would be dropped from the
tab and `report --timeline` without a word. (The page's words from the schema: test_tensorboard_plugin_static.py.)"""

from __future__ import annotations

import json
from pathlib import Path

from tests.standins.timelines import Clock, start_attempt
from tpuctl.profiling.verdict import Op, StepTimes, Unreadable, Verdict, Worker
from tpuctl.runs import timeline as tl
from tpuctl.runs import view, view_schema
from tpuctl.runs.folder import RunFolder
from tpuctl.tensorboard_plugin import checking

WORKERS = ("worker:0", "worker:1")


def _attempt(timeline: tl.Timeline, clock: Clock, attempt: int, *, restore: bool = False) -> None:
    """An attempt's start-up and first step, with a checkpoint restore first where `restore`."""
    start_attempt(timeline, clock, attempt, WORKERS)
    for worker in WORKERS:
        if restore:
            timeline.event(tl.RESTORE_BEGIN, attempt=attempt, worker=worker)
    clock.t += 5
    for worker in WORKERS:
        if restore:
            timeline.event(tl.RESTORE_END, attempt=attempt, worker=worker)
        timeline.event(tl.FIRST_STEP, attempt=attempt, worker=worker, step=1, source="keras")


def _steps(timeline: tl.Timeline, clock: Clock, attempt: int, first: int, count: int) -> int:
    for step in range(first, first + 50 * count, 50):
        clock.t += tl.STEP_EVERY_S
        for worker in WORKERS:
            timeline.event(tl.STEP, attempt=attempt, worker=worker, step=step, source="keras")
    return first + 50 * count


def _run_of_every_part(folder: Path) -> None:
    """A run on its own TPU VM whose first attempt saves, evaluates, stalls and hangs (the launcher stops it and
    restarts), whose second restores and succeeds; with a kept profile verdict and a stacks view."""
    clock = Clock()
    timeline = tl.Timeline(RunFolder(folder).timeline, clock=clock)
    timeline.event(tl.RUN_START, run_id="20261128-101500-train-ab12", backend="local", script="train.py")
    timeline.event(tl.PROVISION_END, node="r20261128-1", zone="us-central2-b", capacity="spot", price_per_hour=8.16, tried=1, hunting_s=3.0)
    _attempt(timeline, clock, 1)
    step = _steps(timeline, clock, 1, 50, 4)
    for begin, end, seconds in ((tl.SAVE_BEGIN, tl.SAVE_END, 8), (tl.EVAL_BEGIN, tl.EVAL_END, 5)):
        for worker in WORKERS:
            timeline.event(begin, attempt=1, worker=worker)
        clock.t += seconds
        for worker in WORKERS:
            timeline.event(end, attempt=1, worker=worker)
    step = _steps(timeline, clock, 1, step, 2)
    clock.t += 200  # no step sample for 200 s: a stall
    step = _steps(timeline, clock, 1, step, 2)
    clock.t += 700
    timeline.event(tl.HANG, attempt=1, idle_s=700.0)
    timeline.flush_steps(1)
    timeline.event(tl.ATTEMPT_END, attempt=1)
    timeline.event(tl.RESTART, attempt=1, why="failure", next_attempt=2)
    clock.t += 60
    timeline.event(tl.ENV_BEGIN, attempt=2, step="packages", hosts=2)  # the hosts' environment, checked again
    clock.t += 2
    timeline.event(tl.ENV_END, attempt=2, step="packages", built=0, seconds=2.0)
    _attempt(timeline, clock, 2, restore=True)
    _steps(timeline, clock, 2, 51, 5)
    timeline.flush_steps(2)
    timeline.event(tl.ATTEMPT_END, attempt=2)
    timeline.event(tl.RUN_END, exit_code=0, state="succeeded")
    timeline.close()
    run = RunFolder(folder)
    ops = (Op("MatMul", "dense/MatMul", 41.5), Op("AllReduce", "all-reduce.7", 12.0))
    workers = tuple(
        Worker(w, f"10.0.0.{i}_8470.xplane.pb", 40, StepTimes(250.0, 12.5, 225.0, 300.0), 12.5, 70.0, 12.0, 5.5, ops, True) for i, w in enumerate(WORKERS)
    )
    unreadable = (Unreadable("worker:2", "10.0.0.9_8470.xplane.pb", "cut short"),)
    verdict = Verdict("2026_11_28_10_20_00", workers, "worker:1", ("worker:1 is 36% slower than the median of the others",), unreadable)
    view.keep_profile(run, "2026_11_28_10_20_00", "gs://b/m", verdict.to_json())
    stacks = run.attempt_dir(1) / "stacks-1"
    stacks.mkdir(parents=True)
    (stacks / "view.txt").write_text('worker:0 waits in a collective\nThread 0x7f01 (most recent call first):\n  File "train.py", line 42\n')


def test_a_view_the_writer_wrote_passes_the_checker_whole(tmp_path: Path) -> None:
    _run_of_every_part(tmp_path)
    written = view.build(RunFolder(tmp_path), live=False, model_dir="gs://b/m")
    # every part the writer has is there to be checked: each segment kind, a VM, a verdict of every field, a hang
    assert {s["kind"] for row in written["rows"] for s in row["segments"]} == set(view_schema.KINDS)
    assert written["goodput"]["attempts"][0]["vm"] and written["restarts"] and written["hangs"]
    [profile] = written["profiles"]
    assert profile["verdict"]["unreadable"] and profile["verdict"]["workers"][0]["top_ops"]

    shown = checking.view(json.dumps(written).encode(), logdir="")

    # the checker adds only its count of what it left out and the Profile tab's name of each session (none here)
    added = {**written, "left_out": 0, "profiles": [{**p, "profile_run": None} for p in written["profiles"]]}
    assert shown == added
