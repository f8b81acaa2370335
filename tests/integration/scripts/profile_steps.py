"""Small steps until OUT/stop exists (at most SECONDS), each marked for the profiler and timed by the script itself.

usage: profile_steps.py OUT SECONDS. Each worker appends "START END" (time.perf_counter seconds is useless
across processes, so time.time) per step to OUT/steps-<index>.txt, and writes OUT/ready-<index> after its
tenth step: the test profiles a run that is training, and compares the verdict's step time with these. Each step
is a few ms of matmuls and a 50 ms sleep: the run lives on while every test that reads it runs, so it should take
few of the cores' cycles. For the same reason a worker takes its steps after the tenth only while a profiler
session records it, and waits between steps otherwise (its workers are independent, `--strategy none`, so none
waits for another): every step a capture sees is one it trained then, and the worker costs next to nothing between
captures.
"""

import os
import sys
import time

import tensorflow as tf
from tensorflow.python.profiler import trace  # trace.enabled(): whether a profiler session records this process

out, seconds = sys.argv[1], float(sys.argv[2])
index = os.environ["TPUCTL_WORKER_INDEX"]
x = tf.random.normal((128, 128))
end = time.time() + seconds
step = 0
with open(os.path.join(out, f"steps-{index}.txt"), "a", buffering=1) as log:
    while time.time() < end and not os.path.exists(os.path.join(out, "stop")):
        began = time.time()
        with tf.profiler.experimental.Trace("train", step_num=step, _r=1):
            for _ in range(10):
                x = tf.tanh(tf.matmul(x, x) / 128.0)
            x.numpy()
            time.sleep(0.05)
        log.write(f"{began} {time.time()}\n")
        step += 1
        if step == 10:
            open(os.path.join(out, f"ready-{index}"), "w").close()
        while step >= 10 and not trace.enabled() and time.time() < end and not os.path.exists(os.path.join(out, "stop")):
            time.sleep(0.02)
