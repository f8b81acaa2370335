"""A worker (or babysat command) for tests/integration/test_faults_matrix.py; $FAULT says what it does.

Every process it starts records its pid in $PID_DIR; once in its steady state
it writes ready-INDEX there, so the test knows when to strike. Its children
inherit $FAULTS_MARK, by which the test finds every process of the run.

FAULT: exit (exit 0), crash (worker 1 exits 7, the others hang), hang, ignore
(ignores SIGINT and SIGTERM, hangs), gil (holds the GIL in C code), leave-group
/ leave-session (starts a child in its own process group or in a new session,
then exits 0; with HANG=1 worker 1 hangs instead of exiting), loud (prints
~320 KB, far more than a pipe holds; worker 1 then exits 7, the others 0),
escape (worker 1 starts a child in a new session, leaves its own group with
os.setsid() and SIGKILLs its parent, tpuctl's reaper; then it hangs, as do the others).
"""
import os
import signal
import subprocess
import sys
import time

index = os.environ.get("TPUCTL_WORKER_INDEX", "0")
fault = os.environ["FAULT"]
pid_dir = os.environ["PID_DIR"]


def record(name: str, pid: int) -> None:
    with open(os.path.join(pid_dir, f"{name}.pid"), "w") as f:
        f.write(str(pid))


def ready() -> None:
    print(f"worker {index} ready ({fault})", flush=True)
    with open(os.path.join(pid_dir, f"ready-{index}"), "w"):
        pass


record(f"worker-{index}", os.getpid())
if fault == "exit":
    sys.exit(0)
if fault == "loud":
    for line in range(3000):
        print("x" * 100, line)
    sys.exit(7 if index == "1" else 0)
if fault == "ignore":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if fault in ("leave-group", "leave-session"):
    child = subprocess.Popen(
        [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"],
        start_new_session=fault == "leave-session",
    )
    record(f"child-{index}", child.pid)
    ready()
    if not (index == "1" and os.environ.get("HANG")):
        sys.exit(0)
else:
    ready()
if fault == "escape" and index == "1":
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    record(f"child-{index}", child.pid)
    os.setsid()
    os.kill(os.getppid(), signal.SIGKILL)
if fault == "crash" and index == "1":
    time.sleep(0.3)
    print("worker 1 about to crash", flush=True)
    sys.exit(7)
if fault == "gil":
    sum(range(10**15))  # one C call: no other thread of this process runs meanwhile
time.sleep(600)
