"""A plain Keras fit in the shape of TensorFlow's multi-worker Keras tutorial (mnist_setup.py's model and its
batch of 64 per worker, random images instead of the download), with no strategy of its own: tpuctl's runtime
enters MultiWorkerMirroredStrategy's scope around it.

usage: mnist_fit.py OUT SECONDS. Each worker writes OUT/ready-<index> after its tenth batch and trains until
OUT/stop exists (at most SECONDS).
"""

import os
import sys
import time

import numpy as np
import tensorflow as tf

out, seconds = sys.argv[1], float(sys.argv[2])
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
    """Says the run is training after ten batches, and ends it when OUT/stop appears or SECONDS pass."""

    def __init__(self):
        super().__init__()
        self.end = time.time() + seconds

    def on_train_batch_end(self, batch, logs=None):
        if batch == 10:
            open(os.path.join(out, f"ready-{index}"), "w").close()
        if os.path.exists(os.path.join(out, "stop")) or time.time() > self.end:
            self.model.stop_training = True


model.fit(train_dataset, epochs=1, steps_per_epoch=1_000_000, verbose=0, callbacks=[Until()])
