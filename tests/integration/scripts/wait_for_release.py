"""Each worker records its pid in $PID_DIR, then waits until the file $RELEASE exists and exits 0:
a run that ends well only if nothing stopped it on the way (the nohup test)."""
import os
import sys
import time

index = os.environ["TPUCTL_WORKER_INDEX"]
with open(os.path.join(os.environ["PID_DIR"], f"worker-{index}.pid"), "w") as f:
    f.write(str(os.getpid()))
print(f"worker {index} waiting for {os.environ['RELEASE']}", flush=True)
deadline = time.monotonic() + 120
while not os.path.exists(os.environ["RELEASE"]):
    if time.monotonic() > deadline:
        sys.exit("never released")
    time.sleep(0.05)
print(f"worker {index} released", flush=True)
