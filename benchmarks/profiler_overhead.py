"""What the opt-in profiler server costs a training step when nobody captures: a Keras fit with --profiler-server, and without.

Both sides are the same one-worker `tpuctl launch` of the same small Keras 3 fit (a two-layer Dense model
on random data, batch 32, no progress bar); the only difference is --profiler-server on one side. Both sides
are ready for `tpuctl profile` (its capture is taken inside the worker at step boundaries, which costs a step
one check while nothing records: tpuctl/runtime/timeline/profiler.py); the subject also runs TensorFlow's
profiler server on its reserved port, for TensorBoard's Capture Profile button or a client of one's own.

The fit and its timing are benchmarks/timeline_overhead.py's: a warm-up fit, then the best per-step time of
five timed fits of --steps batches; the sides' medians are compared. Its steps take about a millisecond on a
CPU, so a per-step cost is as visible as it can be. --keras keras3 keeps tf.keras Keras 3.

    subject  server on     --profiler-server
    anchor   server off    the default

Target: median per-step time, on / off <= 1.01. The sides alternate, the order flipping every round,
after one untimed run of each; each run's log dir is checked: the "on" side's profilers.json names the
server's port, the "off" side's names none. A measurement, not a test: it exits 0 even when the target is missed.

    .venv/bin/python benchmarks/profiler_overhead.py [--runs N] [--steps N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from smoke import parse_args  # benchmarks/smoke.py, beside this script
from timeline_overhead import FIT, PER_STEP  # the same fit, timed the same way
from tpuctl_cli import tpuctl_command  # benchmarks/tpuctl_cli.py, beside this script

TARGET = 1.01
RUN_TIMEOUT_S = 600


def run_once(tpuctl: list[str], script: Path, log_dir: Path, steps: int, on: bool) -> float:
    """One launch; the worker's per-step time in microseconds."""
    env = {**os.environ, "BENCH_STEPS": str(steps), "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""}
    argv = [*tpuctl, "launch", str(script), "--keras", "keras3", "--log-dir", str(log_dir)]
    if on:
        argv.append("--profiler-server")
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False, timeout=RUN_TIMEOUT_S)
    found = PER_STEP.findall(done.stdout)
    if done.returncode != 0 or len(found) != 1:
        raise SystemExit(f"the launch failed (status {done.returncode}): {' '.join(argv)}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    served = '"port"' in (log_dir / "attempt-1" / "profilers.json").read_text()
    if served != on:
        raise SystemExit(f"{log_dir}: profilers.json {'names no' if on else 'names a'} server port")
    return float(found[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="timed runs of each side (default 7)")
    parser.add_argument("--steps", type=int, default=1000, help="batches in each timed fit (default 1000)")
    parser.add_argument("--warm-ups", type=int, default=1, help="untimed pairs first: the file cache, TensorFlow's first import (default 1)")
    args = parse_args(parser, runs=1, steps=20, warm_ups=0)
    tpuctl = tpuctl_command()
    times: dict[bool, list[float]] = {True: [], False: []}
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "fit.py"
        script.write_text(FIT)
        number = 0

        def launch(on: bool) -> float:
            nonlocal number
            number += 1
            return run_once(tpuctl, script, Path(tmp) / f"run-{number}", args.steps, on)

        for _ in range(args.warm_ups):
            launch(True), launch(False)
        for round_no in range(args.runs):
            for on in (True, False) if round_no % 2 == 0 else (False, True):
                times[on].append(launch(on))
    on, off = statistics.median(times[True]), statistics.median(times[False])
    ratio = on / off
    print(f"profiler overhead: {args.runs} interleaved runs each, 1 worker, Keras 3, {args.steps} steps a fit; "
          f"python {sys.version.split()[0]}, {os.cpu_count()} CPU(s)")  # fmt: skip
    print()
    print(f"{'side':<16} {'median us/step':>15} {'runs (us/step)':<60}")
    for name, side in (("server on", True), ("server off", False)):
        print(f"{name:<16} {statistics.median(times[side]):>15.2f} {', '.join(f'{v:.1f}' for v in times[side])}")
    print()
    print(f"ratio on / off: {ratio:.4f} (target <= {TARGET:g}) {'PASS' if ratio <= TARGET else 'MISS'}")


if __name__ == "__main__":
    main()
