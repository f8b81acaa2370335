"""The trivial worker of benchmarks/env_setup.py: record when it started, prove its packages are there, exit.

    env_stamp.py DIR MODULE

Writes time.time() at its start to DIR/<attempt>-<pid> once MODULE (the requirements' root package) imports, so a
worker whose environment lacks the packages fails instead of counting. With HOLD_FIRST=FOLDER in its environment, a
first attempt's worker then waits (up to 10 minutes) for FOLDER/go or its host's end: what a preemption interrupts.
"""
import importlib
import os
import sys
import time

started = time.time()
importlib.import_module(sys.argv[2])
attempt = os.environ.get("TPUCTL_ATTEMPT", "1")
stamp = os.path.join(sys.argv[1], f"{attempt}-{os.getpid()}")
with open(stamp + ".part", "w") as f:
    f.write(repr(started))
os.rename(stamp + ".part", stamp)  # whole when seen: the benchmark reads the folder while workers run
hold = os.environ.get("HOLD_FIRST")
if hold and attempt == "1":
    end = time.monotonic() + 600
    while not os.path.exists(os.path.join(hold, "go")) and time.monotonic() < end:
        time.sleep(0.1)
