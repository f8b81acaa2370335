"""Fails on the first attempt (worker 0 only), succeeds on the next."""
import os
import sys

attempt = os.environ["TPUCTL_ATTEMPT"]
print(f"attempt {attempt} worker {os.environ['TPUCTL_WORKER_INDEX']}", flush=True)
if attempt == "1" and os.environ["TPUCTL_WORKER_INDEX"] == "0":
    sys.exit(5)
