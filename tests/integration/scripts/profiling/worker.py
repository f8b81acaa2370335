"""A small Keras fit with a profiler server: what `tpuctl profile` captures, for the verdict tests.

usage: worker.py PORT TIMES_FILE [--slow-input-ms MS] [--no-markers] [--idle-until-traced] [--seconds S]

Every step's own duration, from its start to the next one's (so it holds all the worker does per step, as a
profiler's step does), goes to TIMES_FILE (one `start_unix_s duration_ms` line each), so a test can hold the
verdict's step time against the script's own clock. One long epoch: no epoch-end work among the steps, and Keras 2's
step numbers (which restart with every epoch) stay unique. Keras 3 leaves no step markers, so (as tpuctl's runtime does
for `fit`) a callback wraps each step in `Trace("train", step_num=..., _r=1)`; `--no-markers` leaves it out, as a
bare Keras 3 script would. Keras 2 (TensorFlow 2.15's tf.keras) marks its steps itself.
`--slow-input-ms` sleeps in the input pipeline before each batch: an input-bound worker. `--idle-until-traced` waits
after the first step until a profiler session records the process (checked between steps), so that a compute-bound
worker does not train at full speed beside the others' start-up; the step it waited in began before the trace and is
not among the steps a test holds the trace against.
"""

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np
import tensorflow as tf
from tensorflow.python.profiler import trace  # trace.enabled(): whether a profiler session records this process

parser = argparse.ArgumentParser()
parser.add_argument("port", type=int)
parser.add_argument("times")
parser.add_argument("--slow-input-ms", type=float, default=0.0)
parser.add_argument("--no-markers", action="store_true")
parser.add_argument("--idle-until-traced", action="store_true")
parser.add_argument("--seconds", type=float, default=90.0)
args = parser.parse_args()

# One thread each: four workers share two cores in the tests, and fewer threads keep their step times steadier.
tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)
tf.profiler.experimental.server.start(args.port)
keras = tf.keras
keras3 = hasattr(keras, "version") and keras.version().startswith("3")


class StepClock(keras.callbacks.Callback):
    """Times each step and, on Keras 3 unless told not to, marks it for the profiler."""

    def __init__(self, out, mark):
        super().__init__()
        self.out, self.mark, self.step, self.trace, self.last, self.flushed = out, mark, 0, None, None, 0.0
        self.end = time.monotonic() + args.seconds

    def on_train_batch_begin(self, batch, logs=None):
        while args.idle_until_traced and self.step > 0 and not trace.enabled() and time.monotonic() < self.end:
            time.sleep(0.02)
        now = (time.time(), time.perf_counter())
        if self.last is not None:
            self.out.write(f"{self.last[0]:.6f} {(now[1] - self.last[1]) * 1000:.3f}\n")
            if now[1] - self.flushed > 0.1:  # not every step: the worker's own writes would lengthen its steps
                self.out.flush()
                self.flushed = now[1]
        self.last = now
        if self.mark:
            self.trace = tf.profiler.experimental.Trace("train", step_num=self.step, _r=1)
            self.trace.__enter__()

    def on_train_batch_end(self, batch, logs=None):
        if self.trace is not None:
            self.trace.__exit__(None, None, None)
            self.trace = None
        if self.step == 0:
            print("training", flush=True)
        self.step += 1
        if time.monotonic() > self.end:
            self.model.stop_training = True


def slow(a, b):
    time.sleep(args.slow_input_ms / 1000)
    return a, b


def slowed(a, b):
    a2, b2 = tf.numpy_function(slow, [a, b], [tf.float32, tf.int64])
    a2.set_shape(a.shape)
    b2.set_shape(b.shape)
    return a2, b2


x = np.random.rand(2048, 64).astype("float32")
y = np.random.randint(0, 10, size=(2048,)).astype("int64")
data = tf.data.Dataset.from_tensor_slices((x, y)).batch(64)
if args.slow_input_ms:
    data = data.map(slowed)
layers = [keras.layers.Input((64,)), keras.layers.Dense(512, activation="relu"), keras.layers.Dense(512, activation="relu"), keras.layers.Dense(10)]
model = keras.Sequential(layers)
model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
with open(args.times, "w") as times:
    model.fit(data.repeat(), epochs=1, steps_per_epoch=10**8, callbacks=[StepClock(times, keras3 and not args.no_markers)], verbose=0)
