"""Wall time of `tpuctl list`, as ratios against anchors timed in the same process.

All commands talk to one local stand-in of Google's TPU v2 API (tests/standins),
started here, that sleeps 50 ms before answering every API request and holds
10 zones with 20 READY nodes in each.

Pair A (target: subject <= 0.25x the anchor):
    subject  tpuctl list --zone Z --json
    anchor   gcloud compute tpus tpu-vm list --zone Z --format=json
             (private CLOUDSDK_CONFIG, api_endpoint_overrides/tpu set to the
             stand-in, --access-token-file, --project; skipped, with a note,
             when gcloud is missing)

Pair B (target: subject <= 2.0x the anchor):
    subject  tpuctl list --all-zones --json      (10 zones, 200 nodes)
    anchor   tpuctl list --zone Z --json         (1 zone, 20 nodes)

Before timing, each command runs once, untimed, as a warm-up and a check: its
output must be a JSON list of the expected nodes (20, or 200 for --all-zones),
and the stand-in's request log gives the API requests it made (with --no-warm-up,
as --smoke has it, that checked run is the first timed one). Then runs are
interleaved (every round runs each command once, in a rotating order) and
medians are reported, because the machine is small and noisy.

This is a measurement, not a test: it exits 0 even when a target is missed.

    .venv/bin/python benchmarks/list_nodes.py [--runs N] [--no-warm-up]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from smoke import parse_args  # benchmarks/smoke.py, beside this script
from tpuctl_cli import tpuctl_command  # benchmarks/tpuctl_cli.py, beside this script

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.standins.fixtures import standin_env  # noqa: E402
from tests.standins.gcloud import Gcloud  # noqa: E402
from tests.standins.google_apis import GoogleStandin  # noqa: E402

GCLOUD_DEFAULT = "/usr/bin/gcloud"
LATENCY_S = 0.05
ZONES = [
    "asia-east1-c",
    "europe-west4-a",
    "us-central1-a",
    "us-central1-b",
    "us-central1-c",
    "us-central1-f",
    "us-central2-b",
    "us-east1-d",
    "us-east5-a",
    "us-west4-a",
]
ZONE = "us-central2-b"  # the single zone both sides list
NODES_PER_ZONE = 20
GCLOUD_TARGET = 0.25
ALL_ZONES_TARGET = 2.0
RUN_TIMEOUT_S = 120

TPUCTL_ZONE = "tpuctl list --zone Z --json"
TPUCTL_ALL = "tpuctl list --all-zones --json"
GCLOUD_ZONE = "gcloud tpu-vm list --zone Z"


def gcloud_path() -> str | None:
    return GCLOUD_DEFAULT if os.access(GCLOUD_DEFAULT, os.X_OK) else shutil.which("gcloud")


def run_once(argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False, timeout=RUN_TIMEOUT_S)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"benchmark command failed with status {done.returncode}: {' '.join(argv)}\n{done.stderr[-2000:]}")
    return elapsed, done.stdout


def check_output(name: str, stdout: str, expected: int) -> None:
    try:
        nodes = json.loads(stdout)
    except ValueError as error:
        raise SystemExit(f"{name}: output is not JSON ({error}): {stdout[:200]!r}") from None
    if not isinstance(nodes, list) or len(nodes) != expected:
        found = len(nodes) if isinstance(nodes, list) else type(nodes).__name__
        raise SystemExit(f"{name}: expected a JSON list of {expected} nodes, got {found}")
    names = {str(node.get("name", "")) for node in nodes if isinstance(node, dict)}  # projects/P/locations/Z/nodes/N
    if len(names) != expected:
        raise SystemExit(f"{name}: expected {expected} distinct node names, got {len(names)}")


def warm_up_and_check(
    g: GoogleStandin, commands: dict[str, tuple[list[str], dict[str, str], int]]
) -> dict[str, tuple[float, int]]:
    """Run each command once, untimed for the results; check its output; (seconds, API requests) per command."""
    seen: dict[str, tuple[float, int]] = {}
    for name, (argv, env, expected) in commands.items():
        before = len(g.requests)
        elapsed, stdout = run_once(argv, env)
        check_output(name, stdout, expected)
        seen[name] = (elapsed, len(g.requests) - before)
    return seen


def measure(
    commands: dict[str, tuple[list[str], dict[str, str], int]], runs: int, first: dict[str, list[float]]
) -> dict[str, list[float]]:
    """`runs` more interleaved rounds after the times in `first` (the checked run's, when it was not a warm-up)."""
    names = list(commands)
    times: dict[str, list[float]] = {name: list(first.get(name, [])) for name in names}
    for round_no in range(runs):
        shift = round_no % len(names)
        for name in names[shift:] + names[:shift]:
            argv, env, _ = commands[name]
            times[name].append(run_once(argv, env)[0])
        print(".", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=11, help="timed runs of every command (default 11)")
    parser.add_argument(
        "--warm-up", action=argparse.BooleanOptionalAction, default=True, help="an untimed checked run of each command first (default: on)"
    )
    args = parse_args(parser, runs=1, warm_up=False)
    runs = max(1, args.runs)

    tpuctl = tpuctl_command()
    gcloud = gcloud_path()
    print(f"tpuctl list: {runs} interleaved runs each; python {sys.version.split()[0]}, {os.cpu_count()} CPU(s)")
    print(
        f"stand-in: {len(ZONES)} zones x {NODES_PER_ZONE} READY nodes, {LATENCY_S * 1000:.0f} ms before every API reply; "
        f"Z = {ZONE}"
    )
    print(f"tpuctl: {' '.join(tpuctl)}")
    if not gcloud:
        print("gcloud: not found (looked at /usr/bin/gcloud and PATH); skipping pair A")
    sys.stdout.flush()

    with tempfile.TemporaryDirectory(prefix="tpuctl-bench-list-") as tmpdir, GoogleStandin(project="tpuctl-bench", seed=0) as g:
        tmp = Path(tmpdir)
        g.set_zones(ZONES)
        for zone in ZONES:
            g.add_ready_nodes(zone, NODES_PER_ZONE, prefix="bench")

        tpuctl_env = standin_env(g, tmp / "tpuctl")
        commands: dict[str, tuple[list[str], dict[str, str], int]] = {
            TPUCTL_ZONE: ([*tpuctl, "list", "--zone", ZONE, "--json"], tpuctl_env, NODES_PER_ZONE),
            TPUCTL_ALL: ([*tpuctl, "list", "--all-zones", "--json"], tpuctl_env, NODES_PER_ZONE * len(ZONES)),
        }
        if gcloud:
            env = Gcloud(g, tmp / "gcloud", ["tpu"]).env  # a private config whose TPU endpoint is the stand-in
            argv = [
                gcloud,
                "compute",
                "tpus",
                "tpu-vm",
                "list",
                "--zone",
                ZONE,
                "--format=json",
                "--project",
                g.project,
                "--access-token-file",
                env["TPUCTL_ACCESS_TOKEN_FILE"],
            ]
            commands[GCLOUD_ZONE] = (argv, env, NODES_PER_ZONE)

        g.faults.latency_s = LATENCY_S
        warm = warm_up_and_check(g, commands)
        kind = "warm-up (untimed" if args.warm_up else "first timed run (no warm-up"
        print(f"{kind}; output checked): " + "; ".join(f"{name} {n} API requests" for name, (_, n) in warm.items()), flush=True)
        first = {} if args.warm_up else {name: [seconds] for name, (seconds, _) in warm.items()}
        times = measure(commands, runs if args.warm_up else runs - 1, first)

    medians = {name: statistics.median(values) for name, values in times.items()}
    pairs: list[tuple[str, str, str, float]] = []
    if gcloud:
        pairs.append(("A", TPUCTL_ZONE, GCLOUD_ZONE, GCLOUD_TARGET))
    pairs.append(("B", TPUCTL_ALL, TPUCTL_ZONE, ALL_ZONES_TARGET))

    print()
    print(f"{'pair':<4} {'subject':<30} {'median s':>8} {'anchor':<30} {'median s':>8} {'ratio':>6} {'target':>8}  result")
    for label, subject, anchor, target in pairs:
        ratio = medians[subject] / medians[anchor]
        verdict = "PASS" if ratio <= target else "MISS"
        print(
            f"{label:<4} {subject:<30} {medians[subject]:>8.3f} {anchor:<30} {medians[anchor]:>8.3f} "
            f"{ratio:>5.2f}x {'<= ' + format(target, '.2f') + 'x':>8}  {verdict}"
        )
    print("(medians; every run in seconds:)")
    for name, values in times.items():
        print(f"  {name:<30} " + " ".join(f"{v:.2f}" for v in values))
    return 0


if __name__ == "__main__":
    sys.exit(main())
