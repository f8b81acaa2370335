"""Worker 1 exits with CRASH_STATUS after a moment; every other worker hangs with a child.

Each process writes its pid to $PID_DIR so the test can prove none survive.
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
    time.sleep(float(os.environ.get("CRASH_AFTER", "0.5")))
    print("worker 1 about to crash", flush=True)
    sys.exit(int(os.environ["CRASH_STATUS"]))
time.sleep(600)
