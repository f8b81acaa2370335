"""Two multi-worker workers: an all-reduce (worker-to-worker gRPC to TF_CONFIG's 127.0.0.1
addresses), then, while both workers are alive, worker 0 records the TCP listeners (`ss -ltnp`)
and connects out to a non-loopback address, as a gs:// upload or a download would."""
import json
import os
import socket
import subprocess
from pathlib import Path

import tensorflow as tf

import tpuctl.runtime

out = Path(os.environ["EXPOSURE_OUT"])
index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
(out / f"{index}.pid").write_text(str(os.getpid()))
strategy = tpuctl.runtime.strategy()
total = strategy.reduce("SUM", strategy.run(lambda: tf.constant(1.0)), axis=None)
print(f"sum over workers: {float(total):g}", flush=True)
if index == 0:
    listeners = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    (out / "listeners.txt").write_text(listeners)
    target = os.environ.get("EXPOSURE_TARGET")
    if target:
        host, port = target.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as conn:
            conn.sendall(b"outbound ok\n")
        print("outbound ok", flush=True)
# A second collective: worker 1 stays alive (and listening) until worker 0 has looked.
strategy.reduce("SUM", strategy.run(lambda: tf.constant(1.0)), axis=None)
