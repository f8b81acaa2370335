"""A Keras fit whose steps are mostly all-reduce: TensorFlow's multi-worker tutorial shape (the script builds its
own MultiWorkerMirroredStrategy from TF_CONFIG), with a wide model and a tiny per-replica batch, so each step
reduces ~12M gradients across the workers for little compute.

usage: allreduce_fit.py OUT SECONDS. Each worker writes OUT/ready-<index> after its third batch and trains until
OUT/stop exists (at most SECONDS); steps are marked by tf-keras itself. Nothing waits for the profiler: `tpuctl
profile` captures at the workers' own step boundaries, so a script that held its steps until a capture began would
hold off the capture too.
"""

import os
import sys
import time

import numpy as np
import tensorflow as tf

out, seconds = sys.argv[1], float(sys.argv[2])
READY_BATCH = 2  # the third: the first traces the train step, unlike the steps after it
index = os.environ["TPUCTL_WORKER_INDEX"]
strategy = tf.distribute.MultiWorkerMirroredStrategy()

per_replica_batch = 2
rng = np.random.default_rng(0)
x = rng.normal(size=(64, 512)).astype("float32")
y = rng.integers(0, 10, size=(64,))
dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(per_replica_batch * strategy.num_replicas_in_sync)

with strategy.scope():
    model = tf.keras.Sequential(
        [
            tf.keras.Input(shape=(512,)),
            tf.keras.layers.Dense(4096, activation="relu"),
            tf.keras.layers.Dense(2048, activation="relu"),
            tf.keras.layers.Dense(10),
        ]
    )
    model.compile(optimizer="sgd", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))


class Until(tf.keras.callbacks.Callback):
    """Says the run is training after its third batch, and ends the run when OUT/stop appears or SECONDS pass."""

    def __init__(self) -> None:
        super().__init__()
        self.end = time.time() + seconds

    def on_train_batch_end(self, batch, logs=None):
        if batch == READY_BATCH:
            open(os.path.join(out, f"ready-{index}"), "w").close()
        if self.ending():
            self.model.stop_training = True

    def ending(self):
        return os.path.exists(os.path.join(out, "stop")) or time.time() > self.end


model.fit(dataset, epochs=1, steps_per_epoch=1_000_000, verbose=0, callbacks=[Until()])
