"""Reading event files: tpuctl's tail reader against TensorBoard's and TensorFlow's, same file, same run.

A file of >= 50 MB of TF2 scalar events (one per record, as tf.summary.scalar
writes them: a 0-d float tensor, the "scalars" plugin named in each tag's
first event) is written once with TensorBoard's protos. Each reader then runs
in its own fresh process, so that peak memory (ru_maxrss) is its own:

    tpuctl     tpuctl.watch.tailer.Tailer(...).poll(): CRC-checked framing and decoding,
               8 MB reads, no TensorFlow import
    loader     tensorboard's EventFileLoader(path).Load()
    iterator   tf.compat.v1.train.summary_iterator(path)

Every reader does the same work per event: the tag, step, wall time and float
value of each summary value (the anchors get them from the Event protos they
yield). Targets: tpuctl >= 5x loader and >= 1x iterator in events/s, and
tpuctl's peak memory <= 1/4 of a TF-importing reader's. Also: after the full
read, 1 KB of events is appended and one more poll is timed; target: <= 1% of
the full read.

The whole command, too: `tpuctl tail --once --json FILE` in a subprocess, its
stdout a pipe the benchmark drains, against a script that dumps the same file
as JSON lines with TensorBoard's EventFileLoader (same keys, one json.dumps per
value, TensorFlow imported as EventFileLoader uses it), also a subprocess.
Both wall times include start-up. Target: tpuctl <= 0.15x the dump's time.

Medians over --runs rounds (default 3) in a rotating order (the commands
interleaved). A measurement, not a test: it exits 0 even when a target is missed.

    .venv/bin/python benchmarks/tail_reader.py [--runs N] [--mb SIZE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TAGS = ("loss", "accuracy", "learning_rate", "val_loss")

# Each runs as `python -c CODE PATH` and prints one JSON line.
_WALK = '''
import struct
unpack = struct.Struct("<f").unpack
def walk(events):
    count = 0
    for event in events:
        step, wall_time = event.step, event.wall_time
        for value in event.summary.value:
            number = value.simple_value if value.WhichOneof("value") == "simple_value" else unpack(value.tensor.tensor_content)[0]
            row = (value.tag, step, number, wall_time)
        count += 1
    return count
'''
READERS = {
    "tpuctl": '''
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
''',
    "loader": _WALK + '''
import json, resource, sys, time
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
import tensorflow  # what EventFileLoader uses for records when it is installed; imported before the clock starts
started = time.perf_counter()
events = walk(EventFileLoader(sys.argv[1]).Load())
seconds = time.perf_counter() - started
print(json.dumps({"events": events, "seconds": seconds, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
''',
    "iterator": _WALK + '''
import json, resource, sys, time
import tensorflow as tf
started = time.perf_counter()
events = walk(tf.compat.v1.train.summary_iterator(sys.argv[1]))
seconds = time.perf_counter() - started
print(json.dumps({"events": events, "seconds": seconds, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
''',
}


# The anchor for the whole command: TensorBoard's loader printing what `tail --json` prints.
LOADER_JSON = '''
import json, struct, sys
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
import tensorflow  # what EventFileLoader reads records with when it is installed
path = sys.argv[1]
unpack = struct.Struct("<f").unpack
write = sys.stdout.write
for event in EventFileLoader(path).Load():
    for value in event.summary.value:
        number = value.simple_value if value.WhichOneof("value") == "simple_value" else unpack(value.tensor.tensor_content)[0]
        write(json.dumps({"kind": "scalar", "run": ".", "tag": value.tag, "step": event.step, "value": number,
                          "wall_time": event.wall_time, "file": path}) + "\\n")
'''


def tpuctl_command() -> list[str]:
    script = Path(sys.executable).with_name("tpuctl")
    return [str(script)] if script.exists() else [sys.executable, "-m", "tpuctl"]


def time_command(args: list[str]) -> tuple[float, int]:
    """Wall seconds of a command whose stdout is a pipe drained here, and the lines it printed."""
    import time

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
        print(f"{name:28} {statistics.median(runs_):7.2f} s  {lines[name]} lines  (runs: {', '.join(f'{t:.2f}' for t in runs_)})")
    ratio = statistics.median(times["tpuctl tail --once --json"]) / statistics.median(times["loader JSON dump"])
    print(f"{'tail --json / loader JSON dump (time)':38} {ratio:8.4f}  target <= 0.15  {'PASS' if ratio <= 0.15 else 'FAIL'}")


def scalar_event(tag: str, step: int, value: float, first: bool) -> bytes:
    from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2

    tensor = tensor_pb2.TensorProto(dtype=1, tensor_content=struct.pack("<f", value))
    tensor.tensor_shape.SetInParent()
    entry = summary_pb2.Summary.Value(tag=tag, tensor=tensor)
    if first:
        entry.metadata.plugin_data.plugin_name = "scalars"
    return event_pb2.Event(wall_time=1.7e9 + step * 0.01, step=step, summary=summary_pb2.Summary(value=[entry])).SerializeToString()


def write_file(path: Path, megabytes: int) -> int:
    from tensorboard.compat.proto import event_pb2

    from tpuctl.watch.records import frame

    events = 0
    with path.open("wb") as handle:
        handle.write(frame(event_pb2.Event(wall_time=1.7e9, file_version="brain.Event:2").SerializeToString()))
        events += 1
        step = 0
        while handle.tell() < megabytes << 20:
            handle.write(b"".join(frame(scalar_event(TAGS[i % 4], step + i // 4, 1.0 / (step + i + 1), step == 0 and i < 4)) for i in range(4000)))
            step += 1000
            events += 4000
    return events


def appended_kb(step: int) -> bytes:
    from tpuctl.watch.records import frame

    chunk = b""
    while len(chunk) < 1024:
        chunk += frame(scalar_event("loss", step, 0.5, False))
        step += 1
    return chunk


def run_reader(name: str, path: Path, extra: bytes) -> dict[str, float]:
    args = [sys.executable, "-c", READERS[name], str(path), str(ROOT)] + ([extra.hex()] if name == "tpuctl" else [])
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{name} reader failed:\n{done.stderr[-2000:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--mb", type=int, default=52)
    parser.add_argument("--only-command", action="store_true", help="time only the whole commands (tail --json vs the loader's JSON dump)")
    options = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    with tempfile.TemporaryDirectory(prefix="tpuctl-bench-") as folder:
        master = Path(folder) / "events.out.tfevents.bench"
        total = write_file(master, options.mb)
        size_mb = master.stat().st_size / 2**20
        print(f"event file: {size_mb:.1f} MB, {total} events (TF2 scalars); {options.runs} run(s) per reader, medians")
        compare_commands(master, options.runs)
        if options.only_command:
            return
        extra = appended_kb(10**7)
        results: dict[str, list[dict[str, float]]] = {name: [] for name in READERS}
        names = list(READERS)
        for round_ in range(options.runs):
            for name in names[round_ % 3 :] + names[: round_ % 3]:
                copy = Path(folder) / f"run-{name}" / master.name
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


if __name__ == "__main__":
    main()
