"""Reading event files: tpuctl's tail reader against TensorBoard's and TensorFlow's, on files TensorFlow wrote.

Every file is written by the real producer, never by our protos: the writer
scripts below run in their own interpreter and the benchmark only reads what
they leave.

    tf 2.21     tf.summary.scalar in a tf.function loop (4 tags per step) under the
                interpreter running this script: >= --mb MB
    tf 2.15     the same script under --tf215 (default .venv-tf215/bin/python): >= --mb MB
    keras fit   Keras 3's TensorBoard callback during a real `model.fit`
                (update_freq=1, histogram_freq=1: per-batch and per-epoch scalars,
                the model's graph, weight histograms); the train/ file, --keras-steps
                batches (a real fit writes about 800 scalars/s here, so it is smaller)

All of them carry the "scalars" plugin's metadata in every scalar event, as
TensorFlow writes it. For each file, the share of records tpuctl's bulk path
took is printed (the rest went through protobuf).

The whole command: `tpuctl tail --once --json FILE` in a subprocess, its stdout
a pipe the benchmark drains, against a script that dumps the same file's
scalars as JSON lines with TensorBoard's EventFileLoader (same keys, one
json.dumps per value, TensorFlow imported as EventFileLoader uses it), also a
subprocess. Both wall times include start-up. Target: tpuctl <= 0.15x the
dump's time, on every file.

Then each reader runs in its own fresh process on the tf 2.21 file, so that peak
memory (ru_maxrss) is its own:

    tpuctl     tpuctl.watch.tailer.Tailer(...).updates(): CRC-checked framing and decoding,
               4 MB reads, no TensorFlow import
    loader     tensorboard's EventFileLoader(path).Load()
    iterator   tf.compat.v1.train.summary_iterator(path)

Every reader does the same work per event: the tag, step, wall time and float
value of each scalar value (a tag's plugin from its first metadata, as
TensorBoard decides it). Targets: tpuctl >= 5x loader and >= 1x iterator in
events/s, and tpuctl's peak memory <= 1/4 of a TF-importing reader's. Also:
after the full read, about 1 KB of records TensorFlow wrote (the same writer, a
later step) is appended and one more poll is timed; target: <= 1% of the full
read.

Medians over --runs rounds (default 3) in a rotating order (the commands
interleaved). A measurement, not a test: it exits 0 even when a target is missed.

    .venv/bin/python benchmarks/tail_reader.py [--runs N] [--mb SIZE] [--keras-steps N] [--tf215 PYTHON] [--commands-on all|first]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from smoke import parse_args  # benchmarks/smoke.py, beside this script

ROOT = Path(__file__).resolve().parents[1]
TF215 = ROOT / ".venv-tf215" / "bin" / "python"

# Writers, each run as `python SCRIPT FOLDER ...` by the interpreter whose TensorFlow writes.
# A training loop's summaries in a tf.function, as TensorFlow's guides write them; a large
# queue keeps the writer's flushes out of the loop. Tags carry the loop's name scope ("while/").
# Arguments: FOLDER FIRST STEPS, and optionally a second FOLDER FIRST STEPS that the same process writes next
# (the later records the benchmark appends: one TensorFlow import fewer than a writer of their own).
WRITE_SUMMARIES = """
import sys
import tensorflow as tf

def write(folder, first, steps):
    writer = tf.summary.create_file_writer(folder, max_queue=100_000, flush_millis=600_000)

    @tf.function
    def train(first, steps):
        with writer.as_default():
            for step in tf.range(first, first + steps):
                x = tf.cast(step + 1, tf.float32)
                tf.summary.scalar("loss", 1.0 / x, step=step)
                tf.summary.scalar("accuracy", 1.0 - 1.0 / x, step=step)
                tf.summary.scalar("learning_rate", 0.001 * tf.exp(-x / 1e5), step=step)
                tf.summary.scalar("val_loss", 2.0 / x, step=step)

    train(tf.constant(first, tf.int64), tf.constant(steps, tf.int64))
    writer.close()

for at in range(1, len(sys.argv), 3):
    write(sys.argv[at], int(sys.argv[at + 1]), int(sys.argv[at + 2]))
"""
# Keras 3's TensorBoard callback during a real fit (generated data, batch size 1: one write per step).
KERAS_FIT = """
import sys
import numpy as np
import keras
folder, steps = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(0)
x = rng.normal(size=(steps * 5 // 4, 8)).astype("float32")
y = (x.sum(axis=1) > 0).astype("float32")
model = keras.Sequential([keras.Input(shape=(8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1, activation="sigmoid")])
model.compile(optimizer="adam", loss="binary_crossentropy", metrics=["accuracy"])
board = keras.callbacks.TensorBoard(log_dir=folder, update_freq=1, histogram_freq=1)
model.fit(x, y, epochs=4, batch_size=4, validation_split=0.2, verbose=0, callbacks=[board])
"""
# Bytes per step (4 records) of WRITE_SUMMARIES at six-digit steps: how many steps make --mb.
BYTES_PER_STEP = 296
# The step the appended records start at (six-digit steps before it, eight-digit ones after).
EXTRA_FIRST = 10**7

# Each runs as `python -c CODE PATH` and prints one JSON line. A tag's plugin is its first metadata's.
_WALK = """
import struct
unpack = struct.Struct("<f").unpack
def walk(events):
    count = 0
    plugins = {}
    for event in events:
        step, wall_time = event.step, event.wall_time
        for value in event.summary.value:
            if plugins.setdefault(value.tag, value.metadata.plugin_data.plugin_name) not in ("", "scalars"):
                continue
            kind = value.WhichOneof("value")
            if kind == "simple_value":
                number = value.simple_value
            elif kind == "tensor":
                content = value.tensor.tensor_content
                number = unpack(content)[0] if content else value.tensor.float_val[0]
            else:
                continue
            row = (value.tag, step, number, wall_time)
        count += 1
    return count
"""
READERS = {
    "tpuctl": """
import json, resource, sys, time
sys.path.insert(0, sys.argv[2])
from tpuctl.watch.sources import LocalSource
from tpuctl.watch.tailer import Tailer
path = sys.argv[1]
started = time.perf_counter()
tailer = Tailer(LocalSource(path))
events = 0
for update in tailer.updates():  # as `tpuctl tail` consumes them: a chunk at a time
    events += update.records
    rows = update.batches
seconds = time.perf_counter() - started
extra = bytes.fromhex(sys.argv[3])
with open(path, "ab") as handle:
    handle.write(extra)
again = time.perf_counter()
second = tailer.poll()
poll_seconds = time.perf_counter() - again
print(json.dumps({"events": events, "seconds": seconds, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "poll_seconds": poll_seconds, "poll_bytes": second.bytes_read, "poll_scalars": len(list(second.scalars()))}))
""",
    "loader": _WALK
    + """
import json, resource, sys, time
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
import tensorflow  # what EventFileLoader uses for records when it is installed; imported before the clock starts
started = time.perf_counter()
events = walk(EventFileLoader(sys.argv[1]).Load())
seconds = time.perf_counter() - started
print(json.dumps({"events": events, "seconds": seconds, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
""",
    "iterator": _WALK
    + """
import json, resource, sys, time
import tensorflow as tf
started = time.perf_counter()
events = walk(tf.compat.v1.train.summary_iterator(sys.argv[1]))
seconds = time.perf_counter() - started
print(json.dumps({"events": events, "seconds": seconds, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
""",
}


# The anchor for the whole command: TensorBoard's loader printing what `tail --json` prints (scalars).
LOADER_JSON = """
import json, struct, sys
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
import tensorflow  # what EventFileLoader reads records with when it is installed
path = sys.argv[1]
unpack = struct.Struct("<f").unpack
write = sys.stdout.write
plugins = {}
for event in EventFileLoader(path).Load():
    for value in event.summary.value:
        if plugins.setdefault(value.tag, value.metadata.plugin_data.plugin_name) not in ("", "scalars"):
            continue
        content = value.tensor.tensor_content
        number = unpack(content)[0] if content else value.tensor.float_val[0]
        write(json.dumps({"kind": "scalar", "run": ".", "tag": value.tag, "step": event.step, "value": number,
                          "wall_time": event.wall_time, "file": path}) + "\\n")
"""

# How much of a file the bulk path took: the decoder's own count, in this process.
FAST_SHARE = """
import json, sys
sys.path.insert(0, sys.argv[2])
from tpuctl.watch.sources import LocalSource
from tpuctl.watch.tailer import Tailer
tailer = Tailer(LocalSource(sys.argv[1]))
update = tailer.poll()
decoder = next(iter(tailer.files.values())).decoder
print(json.dumps({"records": update.records, "fast": decoder.fast, "scalars": sum(len(b[2]) for b in update.batches), "others": dict(update.others)}))
"""


def tpuctl_command() -> list[str]:
    script = Path(sys.executable).with_name("tpuctl")
    return [str(script)] if script.exists() else [sys.executable, "-m", "tpuctl"]


def time_command(args: list[str]) -> tuple[float, int]:
    """Wall seconds of a command whose stdout is a pipe drained here, and the lines it printed."""
    started = time.perf_counter()
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=ROOT)
    assert process.stdout is not None
    lines = 0
    while chunk := process.stdout.read(1 << 20):
        lines += chunk.count(b"\n")
    code = process.wait()
    seconds = time.perf_counter() - started
    if code != 0:
        raise SystemExit(f"{args[0]} exited {code}")
    return seconds, lines


def compare_commands(path: Path, runs: int) -> None:
    """`tpuctl tail --once --json` against TensorBoard's loader dumping JSON: whole processes, interleaved."""
    commands = {
        "tpuctl tail --once --json": [*tpuctl_command(), "tail", str(path), "--once", "--json"],
        "loader JSON dump": [sys.executable, "-c", LOADER_JSON, str(path)],
    }
    times: dict[str, list[float]] = {name: [] for name in commands}
    lines: dict[str, int] = {}
    for round_ in range(runs):
        for name in list(commands)[round_ % 2 :] + list(commands)[: round_ % 2]:
            seconds, lines[name] = time_command(commands[name])
            times[name].append(seconds)
    for name, runs_ in times.items():
        print(f"  {name:28} {statistics.median(runs_):7.2f} s  {lines[name]} lines  (runs: {', '.join(f'{t:.2f}' for t in runs_)})")
    ratio = statistics.median(times["tpuctl tail --once --json"]) / statistics.median(times["loader JSON dump"])
    print(f"  {'tail --json / loader JSON dump (time)':38} {ratio:8.4f}  target <= 0.15  {'PASS' if ratio <= 0.15 else 'MISS'}")


def run_writer(python: str | Path, code: str, folder: Path, *args: int | Path) -> Path:
    """Run a writer script in its own interpreter; the largest event file it leaves (Keras: the train/ one).
    The script is a file, not `-c`: AutoGraph reads a tf.function's source to convert its loop."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""}
    script = folder.with_name(folder.name + "_writer.py")
    script.write_text(code, encoding="utf-8")
    done = subprocess.run([str(python), str(script), str(folder), *map(str, args)], capture_output=True, text=True, check=False, env=env)
    if done.returncode != 0:
        raise SystemExit(f"{python} failed to write events:\n{done.stderr[-2000:]}")
    found = sorted(folder.rglob("*.tfevents.*"), key=lambda p: p.stat().st_size)
    return found[-1]


def appended_records(folder: Path) -> bytes:
    """About 1 KB of records the same writer wrote at later steps (EXTRA_FIRST on, into `folder`), without its file_version record."""
    path = max(folder.rglob("*.tfevents.*"), key=lambda p: p.stat().st_size)
    data = path.read_bytes()
    return data[16 + int.from_bytes(data[:8], "little") :]


def fast_share(path: Path) -> str:
    done = subprocess.run([sys.executable, "-c", FAST_SHARE, str(path), str(ROOT)], capture_output=True, text=True, check=True)
    found = json.loads(done.stdout)
    share = 100 * found["fast"] / found["records"]
    return f"bulk path took {found['fast']} of {found['records']} records ({share:.2f}%); {found['scalars']} scalars, others {found['others']}"


def run_reader(name: str, path: Path, extra: bytes) -> dict[str, float]:
    args = [sys.executable, "-c", READERS[name], str(path), str(ROOT)] + ([extra.hex()] if name == "tpuctl" else [])
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{name} reader failed:\n{done.stderr[-2000:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def compare_readers(folder: Path, master: Path, extra: bytes, runs: int) -> None:
    results: dict[str, list[dict[str, float]]] = {name: [] for name in READERS}
    names = list(READERS)
    for round_ in range(runs):
        for name in names[round_ % 3 :] + names[: round_ % 3]:
            copy = folder / f"run-{name}" / master.name
            copy.parent.mkdir(exist_ok=True)
            copy.write_bytes(master.read_bytes())  # tpuctl appends to its copy; every round starts equal
            results[name].append(run_reader(name, copy, extra))
    rate = {name: statistics.median(r["events"] / r["seconds"] for r in runs) for name, runs in results.items()}
    rss = {name: statistics.median(r["rss_mb"] for r in runs) for name, runs in results.items()}
    print(f"{'reader':10} {'events/s':>10} {'peak MB':>8}")
    for name in READERS:
        print(f"{name:10} {rate[name]:10.0f} {rss[name]:8.0f}")
    checks = [
        ("tpuctl / loader (events/s)", rate["tpuctl"] / rate["loader"], 5.0, ">="),
        ("tpuctl / iterator (events/s)", rate["tpuctl"] / rate["iterator"], 1.0, ">="),
        ("tpuctl / TF reader (peak memory)", rss["tpuctl"] / min(rss["loader"], rss["iterator"]), 0.25, "<="),
    ]
    polls = results["tpuctl"]
    poll_ratio = statistics.median(r["poll_seconds"] / r["seconds"] for r in polls)
    checks.append(("poll after +1 KB / full read (time)", poll_ratio, 0.01, "<="))
    print(f"poll after appending {len(extra)} bytes: read {int(polls[0]['poll_bytes'])} bytes, {int(polls[0]['poll_scalars'])} new scalars")
    for label, ratio, target, sense in checks:
        met = ratio >= target if sense == ">=" else ratio <= target
        print(f"{label:38} {ratio:8.4f}  target {sense} {target:g}  {'PASS' if met else 'MISS'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--mb", type=int, default=52, help="size of each tf.summary file")
    parser.add_argument("--keras-steps", type=int, default=20_000, help="batches of the Keras fit (0: no Keras file)")
    parser.add_argument("--tf215", default=str(TF215), help="an interpreter with TensorFlow 2.15 ('' to skip that file)")
    parser.add_argument("--only-command", action="store_true", help="time only the whole commands (tail --json vs the loader's JSON dump)")
    parser.add_argument(
        "--commands-on", choices=("all", "first"), default="all",
        help="the whole-command comparison on every file (default) or on the first (tf 2.21) file only",
    )  # fmt: skip
    # smoke: no TF 2.15 file (its writer takes the 2.21 writer's path); the Keras file is written and read by tpuctl
    # (its bulk-path share), the whole-command comparison, the same path on another file, runs on the first file only
    options = parse_args(parser, runs=1, mb=0, keras_steps=5, tf215="", commands_on="first")
    sys.path.insert(0, str(ROOT))
    steps = (options.mb << 20) // BYTES_PER_STEP + 1
    with tempfile.TemporaryDirectory(prefix="tpuctl-bench-") as name:
        folder = Path(name)
        files = {"tf 2.21 tf.summary.scalar": run_writer(sys.executable, WRITE_SUMMARIES, folder / "tf221", 0, steps, folder / "extra", EXTRA_FIRST, 3)}
        if options.tf215 and Path(options.tf215).exists():
            files["tf 2.15 tf.summary.scalar"] = run_writer(options.tf215, WRITE_SUMMARIES, folder / "tf215", 0, steps)
        else:
            print(f"no TF 2.15 file: {options.tf215 or '--tf215'} not found")
        if options.keras_steps:
            files["keras 3 fit, TensorBoard callback"] = run_writer(sys.executable, KERAS_FIT, folder / "keras", options.keras_steps)
        for number, (label, path) in enumerate(files.items()):
            if number == 0 or options.commands_on == "all":
                print(f"{label}: {path.stat().st_size / 2**20:.1f} MB; {fast_share(path)}; {options.runs} run(s), medians")
                compare_commands(path, options.runs)
            else:
                print(f"{label}: {path.stat().st_size / 2**20:.1f} MB; {fast_share(path)}; whole commands not compared (--commands-on first)")
        if options.only_command:
            return
        master = files["tf 2.21 tf.summary.scalar"]
        print(f"readers on the tf 2.21 file ({master.stat().st_size / 2**20:.1f} MB):")
        compare_readers(folder, master, appended_records(folder / "extra"), options.runs)


if __name__ == "__main__":
    main()
