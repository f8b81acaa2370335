"""A plain Keras fit in the shape of TensorFlow's multi-worker Keras tutorial (mnist_setup.py's model and its
batch of 64 per worker, random images instead of the download), with no strategy of its own: tpuctl's runtime
enters MultiWorkerMirroredStrategy's scope around it.

usage: mnist_fit.py OUT SECONDS. Each worker writes OUT/ready-<index> after its third batch and trains until
OUT/stop exists (at most SECONDS). After it a worker waits for the test's profiler session to begin
recording it before it steps on: steps taken before the capture show nothing, and on the test's two cores they
would slow everything else (the capture's own TensorFlow import among them). The wait sits between steps, so the
captured steps are whole steps as trained; once the session began, the worker trains on (a wait again after it
could leave one worker of the pair stepping into an all-reduce the other never joins).
"""

import os
import sys
import time

import numpy as np
import tensorflow as tf
from tensorflow.python.profiler import trace  # trace.enabled(): whether a profiler session records this process

out, seconds = sys.argv[1], float(sys.argv[2])
READY_BATCH = 2  # the third: the first traces the train step, unlike the steps after it
index = os.environ["TPUCTL_WORKER_INDEX"]

rng = np.random.default_rng(int(index))
x_train = rng.integers(0, 255, size=(6000, 28, 28)).astype(np.float32) / np.float32(255)
y_train = rng.integers(0, 10, size=(6000,)).astype(np.int64)
train_dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(6000).repeat().batch(64)

model = tf.keras.Sequential(
    [
        tf.keras.layers.InputLayer(input_shape=(28, 28)),
        tf.keras.layers.Reshape(target_shape=(28, 28, 1)),
        tf.keras.layers.Conv2D(32, 3, activation="relu"),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(128, activation="relu"),
        tf.keras.layers.Dense(10),
    ]
)
model.compile(
    loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    optimizer=tf.keras.optimizers.SGD(learning_rate=0.001),
    metrics=["accuracy"],
)


class Until(tf.keras.callbacks.Callback):
    """Says the run is training after its third batch, then waits for a profiler session to begin, and ends the run
    when OUT/stop appears or SECONDS pass."""

    def __init__(self):
        super().__init__()
        self.end = time.time() + seconds

    def on_train_batch_end(self, batch, logs=None):
        if batch == READY_BATCH:
            open(os.path.join(out, f"ready-{index}"), "w").close()
        while batch == READY_BATCH and not trace.enabled() and not self.ending():
            time.sleep(0.02)
        if self.ending():
            self.model.stop_training = True

    def ending(self):
        return os.path.exists(os.path.join(out, "stop")) or time.time() > self.end


model.fit(train_dataset, epochs=1, steps_per_epoch=1_000_000, verbose=0, callbacks=[Until()])
