"""What reading a week-long run's timeline costs: `tpuctl report --json` and the run's view against reading the file raw.

The timeline is written by tpuctl's own writer (tpuctl/runs/timeline.py's Timeline, its clock injected so a week
passes in seconds): 64 workers, one step line each every STEP_EVERY_S (30 s) for 7 days, ~1.3 M step lines (~165 MB),
preempted 9 times (10 attempts, the contract's size case). Then, on the same file:

    anchor   reading all its bytes and counting its lines, in this process (the least any reader does)
    subject  `tpuctl report LOG_DIR --json` (the console script, a process of its own: what users type)
    info     tpuctl.runs.view.build (the view the launcher publishes into the model dir), in this process; its JSON size;
             and `report --timeline`'s check (tensorboard_plugin/checking.py) and drawing of that view, 200 columns wide

Target: the report in under 5 s (PASS), the ratio to the anchor printed beside the absolute seconds. The view must
stay under 2 MB. Then a run of many short attempts (16 workers, 1000 attempts: a crash-looping run within
--max-restarts' bound), where the view's rows are many: view.build's CPU time against the report's on the same
folder, in this process; target at most 2.5x (the rows' own cost; building once scanned every event per attempt).
A measurement, not a test: it exits 0 even when a target is missed.

    .venv/bin/python benchmarks/report_big_timeline.py [--workers N] [--days D] [--attempts N] [--many N]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from smoke import parse_args  # benchmarks/smoke.py, beside this script
from tpuctl_cli import run_checked, tpuctl_command  # benchmarks/tpuctl_cli.py, beside this script

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.standins.timelines import write_run  # noqa: E402
from tpuctl.cli.diagnosis.timeline_drawing import draw  # noqa: E402
from tpuctl.runs import goodput, view  # noqa: E402 - after the checkout is on the path
from tpuctl.runs import timeline as tl  # noqa: E402
from tpuctl.runs.folder import RunFolder  # noqa: E402
from tpuctl.tensorboard_plugin import checking  # noqa: E402

TARGET_S = 5.0
MANY_TARGET = 2.5  # view.build's CPU time over the report's, for a run of many attempts
VIEW_LIMIT = 2 << 20


def write_week(folder: Path, workers: int, days: float, attempts: int) -> int:
    """A run of `workers` workers for `days`, a checkpoint an hour, `attempts` attempts (preemptions evenly spread;
    tests/standins/timelines.py). Its line count."""
    samples = int(days * 86400 / tl.STEP_EVERY_S)
    restarts = [samples * i // attempts for i in range(1, attempts)]
    write_run(folder, workers=workers, samples=samples, restarts=restarts, save_every=120)
    with RunFolder(folder).timeline.open("rb") as file:
        return sum(1 for _ in file)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, default=64)
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--attempts", type=int, default=10)
    parser.add_argument("--many", type=int, default=1000, help="attempts of the many-attempts run (16 workers)")
    args = parse_args(parser, workers=4, days=0.25, attempts=2, many=20)
    with tempfile.TemporaryDirectory(prefix="tpuctl-bench-") as where:
        folder = Path(where) / "run"
        folder.mkdir()
        started = time.perf_counter()
        lines = write_week(folder, args.workers, args.days, args.attempts)
        size = RunFolder(folder).timeline.stat().st_size
        shape = f"{args.workers} workers x {args.days:g} days x {args.attempts} attempts"
        print(f"timeline: {shape}, {lines} lines, {size / 1e6:.1f} MB, written in {time.perf_counter() - started:.1f} s")

        started = time.perf_counter()
        with RunFolder(folder).timeline.open("rb") as file:
            counted = sum(chunk.count(b"\n") for chunk in iter(lambda: file.read(1 << 20), b""))
        anchor = time.perf_counter() - started

        env = {k: v for k, v in os.environ.items() if k not in ("TF_CONFIG", "TPUCTL_LOG_DIR")}
        env["PYTHONPATH"] = str(ROOT)
        started = time.perf_counter()
        report = json.loads(run_checked([*tpuctl_command(), "report", str(folder), "--json"], env, timeout_s=600))
        subject = time.perf_counter() - started

        started = time.perf_counter()
        built = view.build(RunFolder(folder), live=False)
        building = time.perf_counter() - started
        shipped = len(json.dumps(built).encode())
        started = time.perf_counter()
        drawn = draw(checking.checked(built, logdir=""), width=200, color=True)
        drawing = time.perf_counter() - started

    same = all(report.get(key) == value for key, value in built["goodput"].items())  # the report adds run_id, log_dir, costs
    print(f"anchor  read raw ({counted} lines): {anchor:.2f} s")
    print(f"subject tpuctl report --json: {subject:.2f} s ({subject / anchor:.0f}x the raw read), goodput {report['goodput']}")
    print(f"info    view.build: {building:.2f} s, {shipped / 1e6:.2f} MB JSON, {len(built['rows'])} rows; its goodput is the report's: {same}")
    print(f"info    report --timeline's check and drawing of the view: {drawing:.2f} s, {len(drawn)} lines")
    ok = subject < TARGET_S and shipped < VIEW_LIMIT and same
    print(f"{'PASS' if ok else 'MISS'}: report {subject:.2f} s (target < {TARGET_S:g} s), view {shipped / 1e6:.2f} MB (< 2 MB)")
    many_attempts(args.many)


def many_attempts(attempts: int) -> None:
    """view.build against the report on a run of `attempts` attempts of 16 workers, 5 step samples each."""
    with tempfile.TemporaryDirectory(prefix="tpuctl-bench-") as where:
        folder = RunFolder(Path(where))
        write_run(folder.path, workers=16, samples=5 * attempts, restarts=range(5, 5 * attempts, 5))
        began = time.process_time()
        goodput.of_folder(folder, live=False)
        report_s = time.process_time() - began
        began = time.process_time()
        built = view.build(folder, live=False)
        view_s = time.process_time() - began
    ratio = view_s / max(report_s, 1e-9)
    print(f"many attempts: {len(built['attempts'])} attempts, {len(built['rows'])} rows: report {report_s:.2f} s CPU, view {view_s:.2f} s CPU")
    print(f"{'PASS' if ratio <= MANY_TARGET else 'MISS'}: view / report {ratio:.2f}x (target <= {MANY_TARGET:g}x)")


if __name__ == "__main__":
    main()
