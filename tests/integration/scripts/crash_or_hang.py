"""Worker 1 exits with CRASH_STATUS after a moment; every other worker hangs with a child.

Each process writes its pid to $PID_DIR so the test can prove none survive. Worker 1 crashes only once every worker
and child has written its pid (30 s at most): on a loaded machine the others may start seconds after it, and a crash
before they run proves nothing about stopping them.
"""
import os
import subprocess
import sys
import time

index = os.environ["TPUCTL_WORKER_INDEX"]
pid_dir = os.environ["PID_DIR"]


def record(name: str, pid: int) -> None:
    with open(os.path.join(pid_dir, f"{name}.pid"), "w") as f:
        f.write(str(pid))


record(f"worker-{index}", os.getpid())
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
record(f"child-{index}", child.pid)
print(f"worker {index} running", flush=True)
if index == "1" and os.environ.get("CRASH_STATUS"):
    expected = 2 * int(os.environ["TPUCTL_NUM_WORKERS"])
    deadline = time.monotonic() + 30
    while len(os.listdir(pid_dir)) < expected and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(float(os.environ.get("CRASH_AFTER", "0.5")))
    print("worker 1 about to crash", flush=True)
    sys.exit(int(os.environ["CRASH_STATUS"]))
time.sleep(600)
