"""One `tf.profiler.experimental.client.trace` over several workers' profiler servers, as `tpuctl profile` makes it.

usage: capture.py LOGDIR DURATION_MS HOST:PORT...

It imports TensorFlow while the workers start (the import is most of its time), prints "ready", and traces when a
line comes on stdin. Then it prints one JSON line: the unix times the trace call began and ended (a test picks the
steps the workers timed themselves within them). The files land in LOGDIR/plugins/profile/<session>/<host>_<port>.xplane.pb.
"""

import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf

logdir, duration_ms, addresses = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
options = tf.profiler.experimental.ProfilerOptions(host_tracer_level=2, python_tracer_level=0, device_tracer_level=1)
print("ready", flush=True)
sys.stdin.readline()
began = time.time()
tf.profiler.experimental.client.trace(",".join(f"grpc://{a}" for a in addresses), logdir, duration_ms, num_tracing_attempts=3, options=options)
print(json.dumps({"began": began, "ended": time.time()}), flush=True)
