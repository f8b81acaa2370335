"""What `tpuctl launch` costs over a hand-written shell launcher, as ratios timed in the same process.

Pair 1 (target: tpuctl <= 1.10x the shell launcher):
    tpuctl launch scripts/short_mwms.py --workers 2 --log-dir TMP
    bash scripts/shell_launch.sh: TF_CONFIG exported for each of two workers on two
    free loopback ports (chosen here), TF_USE_LEGACY_KERAS=1 (tpuctl sets it for
    multi-worker runs), both `python short_mwms.py` started in the background, `wait`.
    short_mwms.py imports TensorFlow, builds MultiWorkerMirroredStrategy itself,
    does one strategy.reduce and exits, so both launchers do the same TF work.
    --workers N changes the pair's worker count. --smoke uses 1 (half the TensorFlow
    processes): tpuctl's one-worker launch, which sets no TF_CONFIG, against the shell
    launcher's one-worker cluster; the no-op pair below keeps both launchers' two-worker
    path in every smoke run.

Pair 2 (informational, no target): pure launcher overhead, no TensorFlow:
    tpuctl launch scripts/noop.py --workers 2 --strategy none --log-dir TMP
    the same shell launcher running `python noop.py` twice (always two workers, so a
    smoke run still takes both launchers' multi-worker path).

Runs are interleaved (subject and anchor alternate, the order flipping every
round) and medians are reported. One untimed warm-up of each comes first.
This is a measurement, not a test: it exits 0 even when the target is missed.

    .venv/bin/python benchmarks/launch_overhead.py [--runs N] [--noop-runs N] [--workers N]
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from smoke import parse_args  # benchmarks/smoke.py, beside this script
from tpuctl_cli import tpuctl_command  # benchmarks/tpuctl_cli.py, beside this script

HERE = Path(__file__).resolve().parent
SCRIPTS = HERE / "scripts"
TF_SCRIPT = SCRIPTS / "short_mwms.py"
NOOP_SCRIPT = SCRIPTS / "noop.py"
SHELL_LAUNCHER = SCRIPTS / "shell_launch.sh"
TF_TARGET = 1.10
NOOP_WORKERS = 2
RUN_TIMEOUT_S = 180
# TensorFlow's own log lines around joining the cluster (best effort: only used for a note).
_TF_LOG_TIME = re.compile(r"^I\d{4} [\d:]+:(\d+\.\d+)\s")
_SERVER_STARTED = "Started server with target"
_AGENT_CONNECTED = "Coordination agent has successfully connected"
SLOW_JOIN_S = 0.5


def free_ports(count: int) -> list[int]:
    """Ports the kernel hands out as free right now (bound to 0, then closed)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _kill_group(pid: int, timed_out: threading.Event) -> None:
    timed_out.set()
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_timed(argv: list[str], run_dir: Path, env: dict[str, str]) -> float:
    """Run one launch; its own stdout+stderr go to run_dir/launcher.out. Returns wall seconds."""
    with open(run_dir / "launcher.out", "wb") as out:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        # A plain blocking wait: Popen.wait(timeout=...) polls in sleeps of up to 50 ms,
        # which would round every sub-second launch up to the next poll. A timer kills hangs.
        timed_out = threading.Event()
        watchdog = threading.Timer(RUN_TIMEOUT_S, _kill_group, args=(proc.pid, timed_out))
        watchdog.start()
        try:
            status = proc.wait()
        finally:
            watchdog.cancel()
        elapsed = time.perf_counter() - start
    if timed_out.is_set():
        raise SystemExit(f"timed out after {RUN_TIMEOUT_S}s: {' '.join(argv)} (output in {run_dir})")
    if status != 0:
        tail = (run_dir / "launcher.out").read_text(errors="replace").splitlines()[-15:]
        raise SystemExit(f"launch failed with status {status}: {' '.join(argv)}\n" + "\n".join(tail))
    return elapsed


def tf_expect(workers: int) -> str:
    """What short_mwms.py prints on each of `workers` workers."""
    return f"replicas={workers} sum={float(workers)}"


def check_output(run_dir: Path, expect: str | None, label: str, workers: int) -> None:
    """Every worker printed `expect` (in their log files, wherever the launcher put them)."""
    if expect is None:
        return
    found = 0
    for path in run_dir.rglob("worker-*.log"):
        if expect in path.read_text(errors="replace"):
            found += 1
    if found < workers:
        raise SystemExit(f"{label}: expected {expect!r} from all {workers} workers, found it in {found} log(s) under {run_dir}")


def join_wait(run_dir: Path) -> float | None:
    """Longest time a worker spent between starting its gRPC server and joining the coordination
    service. About 1 s instead of a few ms means gRPC retried: a worker dialled the chief before the
    chief was listening, which happens to either launcher by chance. None when TF's log is not found."""
    waits = []
    for path in run_dir.rglob("worker-*.log"):
        started = connected = None
        for line in path.read_text(errors="replace").splitlines():
            match = _TF_LOG_TIME.match(line)
            if not match:
                continue
            if _SERVER_STARTED in line and started is None:
                started = float(match.group(1))
            elif _AGENT_CONNECTED in line and connected is None:
                connected = float(match.group(1))
        if started is not None and connected is not None:
            waits.append(connected - started)
    return max(waits) if waits else None


Launch = Callable[[Path], list[str]]


def pair(script: Path, tpuctl_extra: list[str], workers: int) -> tuple[Launch, Launch]:
    tpuctl = tpuctl_command()

    def subject(run_dir: Path) -> list[str]:
        return [*tpuctl, "launch", str(script), "--workers", str(workers), *tpuctl_extra, "--log-dir", str(run_dir / "logs")]

    def anchor(run_dir: Path) -> list[str]:
        return ["bash", str(SHELL_LAUNCHER), sys.executable, str(script), *map(str, free_ports(workers)), str(run_dir)]

    return subject, anchor


def measure(
    label: str, subject: Launch, anchor: Launch, runs: int, expect: tuple[str | None, int], env: dict[str, str], work: Path, warm_ups: int
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """`expect`: the line every worker prints, and the number of workers."""
    """Timed runs per side, and for each timed run its longest cluster-join wait (when TF logged one)."""
    sides = {"tpuctl": subject, "shell": anchor}
    times: dict[str, list[float]] = {"tpuctl": [], "shell": []}
    joins: dict[str, list[float]] = {"tpuctl": [], "shell": []}
    counter = 0

    def once(side: str, timed: bool) -> None:
        nonlocal counter
        counter += 1
        run_dir = work / f"{label}-{counter:03d}-{side}"
        run_dir.mkdir()
        elapsed = run_timed(sides[side](run_dir), run_dir, env)
        check_output(run_dir, expect[0], f"{label}/{side}", expect[1])
        if timed:
            times[side].append(elapsed)
            wait = join_wait(run_dir)
            if wait is not None:
                joins[side].append(wait)

    print(f"  {label}: warm-up", end="", file=sys.stderr, flush=True)
    for _ in range(warm_ups):
        once("tpuctl", timed=False)
        once("shell", timed=False)
    for round_no in range(runs):
        order = ["tpuctl", "shell"] if round_no % 2 == 0 else ["shell", "tpuctl"]
        for side in order:
            once(side, timed=True)
        print(f" {round_no + 1}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    return times, joins


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs of each side of the TensorFlow pair (default 5)")
    parser.add_argument("--noop-runs", type=int, default=15, help="timed runs of each side of the no-op pair (default 15)")
    parser.add_argument("--warm-ups", type=int, default=1, help="untimed runs of each side before the timed ones (default 1)")
    parser.add_argument("--workers", type=int, default=2, help="workers of the TensorFlow pair (default 2)")
    args = parse_args(parser, runs=1, noop_runs=1, warm_ups=0, workers=1)

    env = dict(os.environ)
    for name in ("TF_CONFIG", "TF_USE_LEGACY_KERAS", "PYTHONPROFILEIMPORTTIME"):
        env.pop(name, None)
    env["NO_COLOR"] = "1"

    print(f"tpuctl launch overhead: python {sys.version.split()[0]}, {os.cpu_count()} CPU(s)")
    print(f"tpuctl: {' '.join(tpuctl_command())}; anchor: bash {SHELL_LAUNCHER.relative_to(HERE.parent)}")
    print(f"runs: {args.runs} (TensorFlow pair), {args.noop_runs} (no-op pair), interleaved, after {args.warm_ups} warm-up(s) each")

    with tempfile.TemporaryDirectory(prefix="tpuctl-bench-") as tmp:
        work = Path(tmp)
        tf_subject, tf_anchor = pair(TF_SCRIPT, [], args.workers)
        expect = (tf_expect(args.workers), args.workers)
        tf_times, tf_joins = measure("mwms", tf_subject, tf_anchor, max(1, args.runs), expect, env, work, args.warm_ups)
        noop_subject, noop_anchor = pair(NOOP_SCRIPT, ["--strategy", "none"], NOOP_WORKERS)
        noop_times, _ = measure("noop", noop_subject, noop_anchor, max(1, args.noop_runs), (None, NOOP_WORKERS), env, work, args.warm_ups)

    rows = [
        (f"{args.workers} worker(s), MultiWorkerMirrored", (tf_times["tpuctl"], tf_times["shell"]), TF_TARGET),
        (f"{NOOP_WORKERS} workers, noop.py (no TF)", (noop_times["tpuctl"], noop_times["shell"]), None),
    ]
    print()
    print(f"{'pair':<32} {'tpuctl s':>9} {'shell s':>9} {'extra s':>8} {'ratio':>6} {'target':>8}  result")
    for name, (ours, theirs), target in rows:
        mine, anchor = statistics.median(ours), statistics.median(theirs)
        ratio = mine / anchor
        target_text = f"<= {target:.2f}x" if target is not None else "none"
        verdict = "info" if target is None else ("PASS" if ratio <= target else "MISS")
        print(
            f"{name:<32} {mine:>9.3f} {anchor:>9.3f} {mine - anchor:>+8.3f} {ratio:>5.2f}x {target_text:>8}  {verdict}"
        )
    print("(medians; tpuctl = `tpuctl launch ... --workers N`, shell = benchmarks/scripts/shell_launch.sh)")
    for name, (ours, theirs), _ in rows:
        print(f"  {name}: tpuctl runs " + " ".join(f"{t:.2f}" for t in ours) + " | shell runs " + " ".join(f"{t:.2f}" for t in theirs))
    if tf_joins["tpuctl"] or tf_joins["shell"]:
        print(
            f"  cluster join (gRPC server up -> joined coordination service, slowest worker): a run over {SLOW_JOIN_S:g} s "
            "means a worker dialled the chief before it listened and gRPC retried ~1 s later"
        )
        for side in ("tpuctl", "shell"):
            waits = tf_joins[side]
            slow = sum(1 for w in waits if w >= SLOW_JOIN_S)
            print(f"    {side:<6} {slow} of {len(waits)} runs slow; waits " + " ".join(f"{w:.2f}" for w in waits))
    return 0


if __name__ == "__main__":
    sys.exit(main())
