"""`tpuctl runs --json` with 10,000 run records, as a ratio against the interpreter's own start.

The records folder (a temporary XDG_STATE_HOME) holds what a year of heavy use leaves:

    9,975 ended runs   succeeded, failed, stopped, preempted; local, ssh, kubernetes, vertex
       20 running      their folders claimed and locked by a live process (a child of this script
                       holds the claims, as a detached supervisor does), so each costs a lock check
        5 lost         records that say running whose folder nobody holds (a SIGKILLed supervisor)

    subject  tpuctl runs --json                  every record, as a JSON list
    anchor   python -c pass                      the interpreter's start, the floor of any command
    info     tpuctl runs                         the same as a table
    info     tpuctl runs --json, no records      the command's fixed cost, without the records

Target: subject <= 45x the anchor (about 0.75 s on a 2-core machine). Every record is opened,
read, parsed and checked on each listing (a hostile or half-written one is skipped, never
trusted), so the cost grows with the records; before read_all was tuned it took 62x here.

The first, untimed run of each command checks the output: 10,000 runs, 20 running, 5 lost.
Then the commands run in a rotating order and medians are reported. A measurement, not a
test: it exits 0 even when the target is missed.

    .venv/bin/python benchmarks/runs_listing.py [--runs N] [--records N]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from smoke import parse_args  # benchmarks/smoke.py, beside this script
from tpuctl_cli import tpuctl_command  # benchmarks/tpuctl_cli.py, beside this script

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tpuctl import endings  # noqa: E402
from tpuctl.endings import INTERRUPTED, Kind  # noqa: E402
from tpuctl.runs import records  # noqa: E402
from tpuctl.runs.records import RunRecord  # noqa: E402

TARGET = 45.0
RUNNING, LOST = 20, 5
RUN_TIMEOUT_S = 120
SCRIPTS = ("train.py", "examples/train_tpu.py", "bert/pretrain.py", "resnet50.py", "sweep/trial.py")
ENDINGS = ((Kind.SUCCEEDED.value, 0, 70), (Kind.FAILED.value, 1, 15), (Kind.STOPPED.value, INTERRUPTED, 9), (Kind.PREEMPTED.value, 1, 6))
BACKENDS = (("local", 60), ("ssh", 20), ("kubernetes", 10), ("vertex", 10))
# Holds the claim of every folder named on stdin until stdin closes, as a detached supervisor holds its run's.
HOLDER = """
import sys
from pathlib import Path
from tpuctl.runs.folder import RunFolder
claims = [RunFolder(Path(line.split()[1])).claim(line.split()[0]) for line in sys.stdin.readline().split(';')]
print("holding", len(claims), flush=True)
sys.stdin.read()
"""


def record(rng: random.Random, number: int, now: float, logs: Path) -> RunRecord:
    """One run of a year's worth: the newest first, a few minutes to a few days long."""
    started = now - number * 3000 - rng.uniform(0, 2000)
    script = rng.choice(SCRIPTS)
    run_id = f"{time.strftime('%Y%m%d-%H%M%S', time.localtime(started))}-{Path(script).stem}-{number:04x}"
    backend = rng.choices([b for b, _ in BACKENDS], [w for _, w in BACKENDS])[0]
    state, code, _ = rng.choices(ENDINGS, [w for *_, w in ENDINGS])[0]
    job = {"kubernetes": f"TFJob {run_id} (default)", "vertex": f"CustomJob {rng.getrandbits(60)} (us-central1)"}.get(backend)
    return RunRecord(
        run_id=run_id, backend=backend, script=script, log_dir=str(logs / run_id), started=started, pid=rng.randint(300, 4_000_000),
        host="tpu-vm-0", detached=rng.random() < 0.5, state=state, ended=started + rng.uniform(60, 3 * 86400), exit_code=code, job=job,
    )  # fmt: skip


def fill(state: Path, count: int) -> tuple[list[RunRecord], subprocess.Popen[str]]:
    """`count` records in the records folder; the newest RUNNING + LOST say running, and RUNNING of them are held."""
    rng = random.Random(23)
    now = time.time()
    logs = state / "tpuctl" / "runs"
    made = [record(rng, number, now, logs) for number in range(count)]
    holder = subprocess.Popen([sys.executable, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    live = [RunRecord(r.run_id, "local", r.script, r.log_dir, r.started, holder.pid, r.host, detached=True) for r in made[: RUNNING + LOST]]
    made[: RUNNING + LOST] = live
    assert holder.stdin is not None and holder.stdout is not None
    holder.stdin.write(";".join(f"{r.run_id} {r.log_dir}" for r in live[:RUNNING]) + "\n")
    holder.stdin.flush()
    if holder.stdout.readline().split() != ["holding", str(RUNNING)]:
        raise SystemExit("the process that holds the running runs' folders did not start")
    for lost in live[RUNNING:]:  # claimed by a supervisor that is gone (its pid now another process's)
        os.close(lost.folder.claim(lost.run_id))
    where = records.folder()
    where.mkdir(parents=True, mode=0o700)
    for one in made:  # what records.write writes, without its fsync per file (setup, not the measurement)
        path = where / f"{one.run_id}.json"
        path.write_text(json.dumps(one.to_json()) + "\n")
        path.chmod(0o600)
    return made, holder


def run_once(argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False, timeout=RUN_TIMEOUT_S)
    elapsed = time.perf_counter() - start
    if done.returncode != 0 or done.stderr:
        raise SystemExit(f"benchmark command failed with status {done.returncode}: {' '.join(argv)}\n{done.stderr[-2000:]}")
    return elapsed, done.stdout


def check(name: str, stdout: str, count: int) -> None:
    """The listing holds every record once, newest first, with the live states the setup made."""
    listed = json.loads(stdout)
    states = Counter(run["state"] for run in listed)
    started = [run["started"] for run in listed]
    if len(listed) != count or states[endings.RUNNING] != RUNNING or states[Kind.LOST.value] != LOST or started != sorted(started, reverse=True):
        raise SystemExit(f"{name}: expected {count} runs, {RUNNING} running and {LOST} lost, newest first; got {len(listed)}, {dict(states)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="timed runs of every command (default 15)")
    parser.add_argument("--records", type=int, default=10_000, help="run records in the folder (default 10,000)")
    args = parse_args(parser, runs=1, records=200)
    tpuctl = tpuctl_command()
    with tempfile.TemporaryDirectory() as tmp:
        full = {**os.environ, "XDG_STATE_HOME": str(Path(tmp) / "state")}
        empty = {**os.environ, "XDG_STATE_HOME": str(Path(tmp) / "empty")}
        os.environ["XDG_STATE_HOME"] = full["XDG_STATE_HOME"]  # where fill() writes (records.folder())
        made, holder = fill(Path(full["XDG_STATE_HOME"]), args.records)
        try:
            commands = {
                f"tpuctl runs --json, {len(made):,} records": ([*tpuctl, "runs", "--json"], full),
                f"tpuctl runs, {len(made):,} records": ([*tpuctl, "runs"], full),
                "tpuctl runs --json, no records": ([*tpuctl, "runs", "--json"], empty),
                "python -c pass": ([sys.executable, "-c", "pass"], full),
            }
            names = list(commands)
            check(names[0], run_once(*commands[names[0]])[1], len(made))
            for name in names[1:]:
                run_once(*commands[name])
            times: dict[str, list[float]] = {name: [] for name in names}
            for round_no in range(args.runs):
                for name in names[round_no % len(names) :] + names[: round_no % len(names)]:
                    times[name].append(run_once(*commands[name])[0])
        finally:
            holder.communicate(timeout=RUN_TIMEOUT_S)
    medians = {name: statistics.median(values) for name, values in times.items()}
    anchor = medians["python -c pass"]
    print(f"run records listing: {args.runs} interleaved runs each; python {sys.version.split()[0]}, {os.cpu_count()} CPU(s)")
    print(f"tpuctl: {' '.join(tpuctl)}")
    print()
    print(f"{'command':<44} {'median s':>9} {'min s':>7} {'ratio':>7} {'target':>8}  result")
    for name in names:
        ratio = medians[name] / anchor
        target, verdict = (f"<= {TARGET:g}x", "PASS" if ratio <= TARGET else "MISS") if name == names[0] else ("none", "info")
        if name == names[-1]:
            target, verdict = "", "(anchor)"
        print(f"{name:<44} {medians[name]:>9.4f} {min(times[name]):>7.4f} {ratio:>6.2f}x {target:>8}  {verdict}")
    per_record = (medians[names[0]] - medians[names[2]]) / len(made) * 1e6
    print(f"(medians; the records cost {per_record:.1f} us each over the command's own start)")


if __name__ == "__main__":
    main()
