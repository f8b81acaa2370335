"""A run's timeline as tpuctl's launcher writes it (tpuctl/runs/timeline.py's own Timeline), at any size, in seconds.

The Timeline's clock is injected: a week of 64 workers is written as fast as the writer writes lines, with the
sampling (STEP_EVERY_S), the attempt's flush of last steps and the event shapes of a real launch. Shared by the unit
tests of the report and the view and by benchmarks/report_big_timeline.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tpuctl.runs import timeline as tl
from tpuctl.runs.folder import RunFolder

WALL0 = 1_764_340_000.0


class Clock:
    """(monotonic, wall), moved by the writer of the run. `wall_extra` moves the wall clock alone, as a laptop's suspend
    does (CLOCK_MONOTONIC stops while asleep, time.time() does not) or an NTP step of the wall clock does."""

    def __init__(self) -> None:
        self.t = 1000.0
        self.wall_extra = 0.0

    def __call__(self) -> tuple[float, float]:
        return self.t, WALL0 + self.t + self.wall_extra


def one_worker_until_ready(folder: Path, clock: Clock, *, ready_after: float = 10.0) -> tl.Timeline:
    """A one-worker run's timeline up to its runtime ready, for a test that writes the rest of it by hand."""
    timeline = tl.Timeline(RunFolder(folder).timeline, clock=clock)
    timeline.event(tl.RUN_START, run_id="run-review", backend="local")
    timeline.event(tl.ATTEMPT_START, attempt=1)
    timeline.event(tl.WORKER_START, attempt=1, worker="worker:0")
    clock.t += ready_after
    timeline.event(tl.RUNTIME_READY, attempt=1, worker="worker:0")
    return timeline

PREEMPTION = "lost with its TPU VM (PREEMPTED)"


def start_attempt(timeline: tl.Timeline, clock: Clock, attempt: int, names: Sequence[str]) -> None:
    """An attempt's start as the launcher writes it: its workers started, their runtimes ready 40 s later."""
    timeline.event(tl.ATTEMPT_START, attempt=attempt)
    for name in names:
        timeline.event(tl.WORKER_START, attempt=attempt, worker=name)
    clock.t += 40
    for name in names:
        timeline.event(tl.RUNTIME_READY, attempt=attempt, worker=name)


def write_run(
    folder: Path, *, workers: int, samples: int, restarts: Sequence[int] = (), save_every: int = 0, eval_every: int = 0,
    step_each: int = 50, names: Sequence[str] = (), run_id: str = "run-standin", cause: str = PREEMPTION,
) -> None:
    """`samples` step lines per worker, STEP_EVERY_S apart; a preemption (then a restart 1000 steps back) before the sample
    each of `restarts`, said in `cause`; every worker's checkpoint save, 8 s long, every `save_every` samples, and its
    validation, 5 s long, every `eval_every`. `names` (any text: the TensorBoard tab's tests plant markup in them)
    replace worker:0..N-1."""
    clock = Clock()
    timeline = tl.Timeline(RunFolder(folder).timeline, clock=clock)
    names = list(names) or [f"worker:{i}" for i in range(workers)]
    timeline.event(tl.RUN_START, run_id=run_id, backend="local")
    attempt, step = 1, 0
    for sample in range(samples):
        if sample == 0 or sample in restarts:
            if sample:
                timeline.event(tl.PREEMPTED, attempt=attempt, worker=names[0], status=cause)
                timeline.flush_steps(attempt)
                timeline.event(tl.ATTEMPT_END, attempt=attempt)
                timeline.event(tl.RESTART, attempt=attempt, why="preemption", next_attempt=attempt + 1)
                attempt, step = attempt + 1, step - 1000
                clock.t += 120
            start_attempt(timeline, clock, attempt, names)
            clock.t += 20
        clock.t += tl.STEP_EVERY_S
        step += step_each
        if save_every and sample % save_every == save_every // 2:
            for name in names:
                timeline.event(tl.SAVE_BEGIN, attempt=attempt, worker=name)
            clock.t += 8
            for name in names:
                timeline.event(tl.SAVE_END, attempt=attempt, worker=name)
        if eval_every and sample % eval_every == eval_every - 1:
            for name in names:
                timeline.event(tl.EVAL_BEGIN, attempt=attempt, worker=name)
            clock.t += 5
            for name in names:
                timeline.event(tl.EVAL_END, attempt=attempt, worker=name)
        first = sample == 0 or sample in restarts
        for index, name in enumerate(names):
            clock.t += 0.0001 * (index % 7)
            timeline.event(tl.FIRST_STEP if first else tl.STEP, attempt=attempt, worker=name, step=step, source="keras")
    timeline.flush_steps(attempt)
    timeline.event(tl.ATTEMPT_END, attempt=attempt)
    timeline.event(tl.RUN_END, exit_code=0, state="succeeded")
    timeline.close()
