"""Wall time of `tpuctl offers TYPE` over 20 zones, against the same answers got from gcloud one zone at a time.

Public capacity-hunting scripts find the zones that offer a type by looping over zones and running
`gcloud compute tpus tpu-vm accelerator-types list --zone Z` in each. tpuctl asks every zone at once.
Both talk to one local stand-in of Google's APIs (tests/standins), started here, that sleeps 50 ms
before answering every API request (about a Google API's reply time from a laptop) and holds 20
zones offering every type.

Pair (target: subject <= 0.25x the anchor):
    subject  tpuctl offers v5litepod-16 --capacity on-demand --json  (20 zones, prices, quotas, ranked)
    anchor   gcloud ... accelerator-types list --zone Z, for each of the 20 zones in turn
             (private CLOUDSDK_CONFIG with api_endpoint_overrides/tpu at the stand-in; the pair
             is skipped, with a note and no verdict of its own, when gcloud is missing)

Before timing, each side runs once, untimed, and its answer is checked: the same set of zones
(with --no-warm-up, as --smoke has it, the first timed round's answers are the ones checked).
Then runs are interleaved (rotating order) and medians reported. Without gcloud the line printed
compares the subject with one `tpuctl offers --zone Z` (one zone's list): a ratio near 1 says the
20 zones cost about one. This is a measurement, not a test: it exits 0 even when a target is missed.

    .venv/bin/python benchmarks/offers.py [--runs N] [--zones N] [--no-warm-up]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from smoke import parse_args  # benchmarks/smoke.py, beside this script
from tpuctl_cli import run_checked, tpuctl_command  # benchmarks/tpuctl_cli.py, beside this script

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.standins.fixtures import standin_env  # noqa: E402
from tests.standins.gcloud import Gcloud  # noqa: E402
from tests.standins.google_apis import GoogleStandin  # noqa: E402

LATENCY_S = 0.05
TYPE = "v5litepod-16"
REGIONS = ["us-central1", "us-east1", "us-east4", "us-east5", "us-west1", "us-west4", "europe-west4", "europe-west1", "asia-east1", "asia-southeast1"]
GCLOUD_TARGET = 0.25
RUN_TIMEOUT_S = 300


def zones(count: int) -> list[str]:
    return [f"{region}-{letter}" for letter in "abcdefgh" for region in REGIONS][:count]


def timed(fn: Callable[[], set[str]]) -> tuple[float, set[str]]:
    start = time.perf_counter()
    found = fn()
    return time.perf_counter() - start, found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs of each side (default 5)")
    parser.add_argument("--zones", type=int, default=20, help="zones the stand-in holds (default 20)")
    parser.add_argument(
        "--warm-up", action=argparse.BooleanOptionalAction, default=True, help="an untimed checked run of each side first (default: on)"
    )
    args = parse_args(parser, runs=1, zones=2, warm_up=False)  # smoke: two zones still take the all-zones-at-once path
    tpuctl = tpuctl_command()
    gcloud_found = shutil.which("gcloud") is not None
    print(f"tpuctl offers over {args.zones} zones: {args.runs} interleaved runs each; python {sys.version.split()[0]}, {os.cpu_count()} CPU(s)")
    print(f"stand-in: {LATENCY_S * 1000:.0f} ms before every API reply; every zone offers {TYPE}", flush=True)
    with tempfile.TemporaryDirectory(prefix="tpuctl-bench-offers-") as tmpdir, GoogleStandin(project="tpuctl-bench", seed=0) as g:
        tmp = Path(tmpdir)
        where = zones(args.zones)
        g.set_zones(where)
        env = standin_env(g, tmp / "tpuctl")

        def ours() -> set[str]:
            return {o["zone"] for o in json.loads(run_checked([*tpuctl, "offers", TYPE, "--capacity", "on-demand", "--json"], env, RUN_TIMEOUT_S))}

        def one_zone() -> set[str]:
            run_checked([*tpuctl, "offers", "--zone", where[0], "--json"], env, RUN_TIMEOUT_S)
            return set(where)

        sides: dict[str, Callable[[], set[str]]] = {"tpuctl offers (all zones at once)": ours}
        if gcloud_found:
            gcloud = Gcloud(g, tmp / "gcloud", ["tpu"])

            def theirs() -> set[str]:
                found = set()
                for zone in where:
                    listed = gcloud.run("compute", "tpus", "tpu-vm", "accelerator-types", "list", f"--zone={zone}", "--format=value(type)")
                    if listed.returncode != 0:
                        raise SystemExit(f"gcloud failed in {zone}: {listed.stderr[-500:]}")
                    if TYPE in listed.stdout.split():
                        found.add(zone)
                return found

            sides["gcloud, one zone at a time"] = theirs
        else:
            print("gcloud: not found; comparing with one zone's `tpuctl offers --zone Z` instead")
            sides["tpuctl offers --zone Z (one zone)"] = one_zone
        g.faults.latency_s = LATENCY_S

        def check(answers: dict[str, set[str]], when: str) -> None:
            if len({frozenset(a) for a in answers.values()}) != 1 or answers[next(iter(sides))] != set(where):
                raise SystemExit(f"the answers differ: {answers}")
            print(f"{when}: both sides name the same zones", flush=True)

        if args.warm_up:
            check({name: timed(fn)[1] for name, fn in sides.items()}, "warm-up (untimed)")
        times: dict[str, list[float]] = {name: [] for name in sides}
        names = list(sides)
        for round_no in range(max(1, args.runs)):
            answers: dict[str, set[str]] = {}
            for name in names[round_no % 2 :] + names[: round_no % 2]:
                seconds, answers[name] = timed(sides[name])
                times[name].append(seconds)
            if round_no == 0 and not args.warm_up:
                check(answers, "first timed round (no warm-up)")
    medians = {name: statistics.median(values) for name, values in times.items()}
    subject, anchor = names
    ratio = medians[subject] / medians[anchor]
    target = GCLOUD_TARGET if gcloud_found else 1.5
    print(f"\n{subject}: median {medians[subject]:.2f} s; {anchor}: median {medians[anchor]:.2f} s")
    print(f"ratio {ratio:.2f}x (target <= {target:.2f}x)  {'PASS' if ratio <= target else 'MISS'}")
    for name, values in times.items():
        print(f"  {name:<36} " + " ".join(f"{v:.2f}" for v in values))
    return 0


if __name__ == "__main__":
    sys.exit(main())
