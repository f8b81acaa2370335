"""Regenerate the stack-dump fixtures in this folder from real processes.

Each scenario is a tiny training-like script written to a scratch folder (so the
paths in the dumps look like a user's script, not like this repository). The script
registers faulthandler on SIGUSR1 (a tpuctl worker uses SIGQUIT: same dump), signals that it is
ready, and blocks; we then take its faulthandler dump (SIGUSR1) and py-spy dumps
(`py-spy dump --pid`, and `--native` for some), and kill it.

    .venv/bin/pip install py-spy==0.4.3
    .venv/bin/python tests/data/stacks/make_fixtures.py [scenario ...]

Needs ptrace rights over the child (root, or kernel.yama.ptrace_scope=0).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from tpuctl.cluster import worker_contract

HERE = Path(__file__).resolve().parent
SCRATCH = Path("/tmp/tpuctl-stack-samples")
PY_SPY = str(Path(sys.executable).with_name("py-spy"))

PRELUDE = """\
import faulthandler, os, signal, sys, threading, time
faulthandler.register(signal.SIGUSR1, file=open(os.environ["DUMP_TO"], "w"), all_threads=True)
def ready():
    open(os.environ["READY_AT"], "w").close()
"""

SCRIPTS = {
    # The straggler: its main thread waits for input in the script's own code; a
    # prefetch thread waits on a queue in the standard library.
    "input_wait": PRELUDE
    + """\
import queue
batches = queue.Queue()

def prefetch():
    batches.get()

def wait_for_batch(step):
    ready()
    time.sleep(3600)

def train_loop():
    for step in range(10):
        wait_for_batch(step)

threading.Thread(target=prefetch, name="prefetch", daemon=True).start()
train_loop()
""",
    # The same, run the way tpuctl runs a worker (python -m tpuctl.runtime SCRIPT, --strategy none).
    "runtime_wrapped": "",
    # Main thread blocked on a lock that another thread holds.
    "lock_wait": PRELUDE
    + """\
lock = threading.Lock()

def holder():
    with lock:
        ready()
        time.sleep(3600)

def wait_for_batch():
    lock.acquire()

def main():
    threading.Thread(target=holder, name="holder", daemon=True).start()
    time.sleep(0.5)
    wait_for_batch()

main()
""",
    # A process that holds the GIL inside C code (catastrophic regex backtracking).
    "gil_in_c": PRELUDE
    + """\
import re

def preprocess():
    ready()
    re.match(r"(a+)+$", "a" * 60 + "b")

preprocess()
""",
    # Deep recursion (past faulthandler's 100-frame cap) and many threads.
    "deep_many_threads": PRELUDE
    + """\
def worker_loop(i):
    time.sleep(3600)

def descend(n):
    if n == 0:
        ready()
        time.sleep(3600)
    descend(n - 1)

for i in range(12):
    threading.Thread(target=worker_loop, args=(i,), name=f"loader-{i}", daemon=True).start()
descend(130)
""",
    # A TensorFlow worker waiting in a collective whose peer never comes.
    "tf_collective": PRELUDE
    + """\
import tensorflow as tf

def train_step(x):
    ready()
    return tf.raw_ops.CollectiveReduceV2(
        input=x, group_size=tf.constant(2), group_key=tf.constant(1), instance_key=tf.constant(1),
        ordering_token=[], merge_op="Add", final_op="Id")

def main():
    x = tf.constant([1.0, 2.0])
    train_step(x)

main()
""",
}

SCRIPTS["runtime_wrapped"] = SCRIPTS["input_wait"]
RUNNER = {"runtime_wrapped": ["-m", "tpuctl.runtime"]}
ENV = {"runtime_wrapped": {worker_contract.STRATEGY: "none"}}

# py-spy variants beyond the plain `py-spy dump --pid`: file suffix -> extra flags.
VARIANTS = {
    "input_wait": {"-full": ["--full-filenames"], "-locals": ["--locals"], "-native": ["--native"]},
    "runtime_wrapped": {"-native": ["--native"]},
    "lock_wait": {"-native": ["--native"]},
    "gil_in_c": {"-native": ["--native"]},
    "tf_collective": {"-native": ["--native"]},
}


def capture(name: str) -> None:
    SCRATCH.mkdir(exist_ok=True)
    script = SCRATCH / "train.py"
    script.write_text(SCRIPTS[name])
    dump = SCRATCH / f"{name}.faulthandler"
    ready = SCRATCH / f"{name}.ready"
    ready.unlink(missing_ok=True)
    env = dict(os.environ, DUMP_TO=str(dump), READY_AT=str(ready), TF_CPP_MIN_LOG_LEVEL="2", **ENV.get(name, {}))
    proc = subprocess.Popen([sys.executable, *RUNNER.get(name, []), str(script)], cwd=SCRATCH, env=env)
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{name}: the sample did not get ready (rc={proc.poll()})")
            time.sleep(0.1)
        time.sleep(1.0)
        os.kill(proc.pid, signal.SIGUSR1)
        time.sleep(1.0)
        shutil.copyfile(dump, HERE / f"{name}.faulthandler.txt")
        for suffix, flags in {"": [], **VARIANTS.get(name, {})}.items():
            args = [PY_SPY, "dump", "--pid", str(proc.pid), *flags]
            out = subprocess.run(args, capture_output=True, text=True, timeout=120, check=True).stdout
            (HERE / f"{name}.py-spy{suffix}.txt").write_text(out)
    finally:
        proc.kill()
        proc.wait()


if __name__ == "__main__":
    for scenario in sys.argv[1:] or list(SCRIPTS):
        capture(scenario)
        print("captured", scenario)
