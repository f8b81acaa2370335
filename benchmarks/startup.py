"""Start-up time of the tpuctl CLI, as ratios against anchors timed in the same process.

Subjects (the console script next to this interpreter, which is what users run):
    tpuctl --help
    tpuctl tf-config --workers 4

Anchors:
    python -c "import click"   the floor for any click CLI       target: subject <= 1.6x
    gcloud --version           the CLI tpuctl stands beside      target: subject <= 0.2x

Runs are interleaved (every round runs each command once, in a rotating order)
and medians are reported, because the machine is small and noisy. Afterwards
each tpuctl command is run once more with `python -X importtime -m tpuctl ...`
to check that it imports neither TensorFlow, google.cloud nor rich, and to
show which imports dominate.

This is a measurement, not a test: it exits 0 even when a target is missed.

    .venv/bin/python benchmarks/startup.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

from smoke import parse_args  # benchmarks/smoke.py, beside this script
from tpuctl_cli import tpuctl_command  # benchmarks/tpuctl_cli.py, beside this script

GCLOUD_DEFAULT = "/usr/bin/gcloud"
CLICK_TARGET = 1.6
GCLOUD_TARGET = 0.2
# Imports a start-up command must not pay for (module name, or package prefix).
FORBIDDEN = ("tensorflow", "google.cloud", "rich")


def gcloud_command() -> list[str] | None:
    found = GCLOUD_DEFAULT if os.access(GCLOUD_DEFAULT, os.X_OK) else shutil.which("gcloud")
    return [found, "--version"] if found else None


def time_once(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"benchmark command failed with status {done.returncode}: {' '.join(argv)}")
    return elapsed


def measure(commands: dict[str, list[str]], runs: int, env: dict[str, str]) -> dict[str, list[float]]:
    names = list(commands)
    for name in names:  # warm-up: page cache, .pyc files; not counted
        time_once(commands[name], env)
    times: dict[str, list[float]] = {name: [] for name in names}
    for round_no in range(runs):
        shift = round_no % len(names)
        for name in names[shift:] + names[:shift]:
            times[name].append(time_once(commands[name], env))
    return times


def imported_modules(stderr: str) -> list[tuple[str, int, int]]:
    """(module, self us, cumulative us) from `-X importtime` output."""
    rows = []
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "imported package" in line:
            continue
        parts = line[len("import time:") :].split("|")
        if len(parts) != 3:
            continue
        try:
            self_us, cumulative_us = int(parts[0]), int(parts[1])
        except ValueError:
            continue
        rows.append((parts[2].strip(), self_us, cumulative_us))
    return rows


def forbidden_hits(modules: list[str], prefix: str) -> list[str]:
    return [m for m in modules if m == prefix or m.startswith(prefix + ".")]


def importtime_rows(argv: list[str], env: dict[str, str]) -> tuple[int, list[tuple[str, int, int]]]:
    done = subprocess.run([sys.executable, "-X", "importtime", *argv], capture_output=True, text=True, env=env, check=False)
    return done.returncode, imported_modules(done.stderr)


def check_imports(label: str, args: list[str], env: dict[str, str], floor: set[str]) -> bool:
    status, rows = importtime_rows(["-m", "tpuctl", *args], env)
    modules = [name for name, _, _ in rows]
    ok = status == 0 and bool(rows)
    if not ok:
        print(f"  FAIL  {label}: could not run it under -X importtime (status {status})")
        return False
    for prefix in FORBIDDEN:
        hits = forbidden_hits(modules, prefix)
        if hits:
            ok = False
            print(f"  FAIL  {label} imports {prefix} ({len(hits)} modules, e.g. {', '.join(hits[:3])})")
        else:
            print(f"  ok    {label} does not import {prefix}")
    total_ms = sum(s for _, s, _ in rows) / 1000
    top = sorted(rows, key=lambda r: r[1], reverse=True)[:6]
    print(
        f"        {len(rows)} modules, {total_ms:.1f} ms import time in all; most self time: "
        + ", ".join(f"{name} {s / 1000:.1f}" for name, s, _ in top)
        + " (ms)"
    )
    tops = [(name, c) for name, _, c in rows if name in ("site", "click", "tpuctl.cli", "tpuctl.cluster.tf_config", "rich")]
    if tops:
        print("        cumulative: " + ", ".join(f"{name} {c / 1000:.1f} ms" for name, c in tops))
    extra = sorted((r for r in rows if r[0] not in floor), key=lambda r: r[1], reverse=True)
    print(
        f"        beyond `import click`: {len(extra)} modules, {sum(s for _, s, _ in extra) / 1000:.1f} ms self time: "
        + ", ".join(f"{name} {s / 1000:.1f}" for name, s, _ in extra[:6])
        + (" ..." if len(extra) > 6 else "")
    )
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21, help="timed runs of every command (default 21)")
    args = parse_args(parser, runs=1)
    runs = max(1, args.runs)

    env = dict(os.environ)
    env.pop("PYTHONPROFILEIMPORTTIME", None)
    env.setdefault("CLOUDSDK_CORE_DISABLE_PROMPTS", "1")

    tpuctl = tpuctl_command()
    subjects = {
        "tpuctl --help": [*tpuctl, "--help"],
        "tpuctl tf-config --workers 4": [*tpuctl, "tf-config", "--workers", "4"],
    }
    anchors: dict[str, tuple[list[str], float]] = {
        'python -c "import click"': ([sys.executable, "-c", "import click"], CLICK_TARGET),
    }
    gcloud = gcloud_command()
    if gcloud:
        anchors["gcloud --version"] = (gcloud, GCLOUD_TARGET)

    print(f"tpuctl start-up: {runs} interleaved runs each; python {sys.version.split()[0]}, {os.cpu_count()} CPU(s)")
    print(f"tpuctl: {' '.join(tpuctl)}")
    if not gcloud:
        print("gcloud: not found (looked at /usr/bin/gcloud and PATH); skipping the gcloud anchor")

    commands = dict(subjects)
    commands.update({name: argv for name, (argv, _) in anchors.items()})
    times = measure(commands, runs, env)
    medians = {name: statistics.median(values) for name, values in times.items()}

    print()
    print(f"{'command':<30} {'median s':>9} {'min s':>7} {'anchor':<26} {'ratio':>6} {'target':>8}  result")
    for name in anchors:
        print(f"{name:<30} {medians[name]:>9.4f} {min(times[name]):>7.4f} (anchor)")
    for name in subjects:
        for anchor, (_, target) in anchors.items():
            ratio = medians[name] / medians[anchor]
            verdict = "PASS" if ratio <= target else "MISS"
            print(
                f"{name:<30} {medians[name]:>9.4f} {min(times[name]):>7.4f} {anchor:<26} "
                f"{ratio:>5.2f}x {'<= ' + format(target, '.2f') + 'x':>8}  {verdict}"
            )

    print()
    print("imports (python -X importtime -m tpuctl ...):")
    _, floor_rows = importtime_rows(["-c", "import click"], env)
    floor = {name for name, _, _ in floor_rows}
    check_imports("tpuctl --help", ["--help"], env, floor)
    check_imports("tpuctl tf-config --workers 4", ["tf-config", "--workers", "4"], env, floor)
    return 0


if __name__ == "__main__":
    sys.exit(main())
