"""A Keras fit in the shape of TensorFlow's multi-worker Keras tutorial (mnist_setup.py's model and its batch of 64
per worker, random images instead of the download), with no strategy of its own: tpuctl's runtime enters
MultiWorkerMirroredStrategy's scope around it, as it does for the tutorial.

usage: fit_until_stopped.py OUT SECONDS [PAUSE]. Each worker writes its pid to OUT/ready-<index> after its third
batch and trains until OUT/stop exists (at most SECONDS), resting PAUSE seconds (default 0.05) after each batch, so
that a run kept for a test module's captures costs the machine's cores little. It appends the time each batch
begins (time.time()) to OUT/steps-<index>.txt: a test sees the run train on, and each step's own duration.
"""

import os
import sys
import time

import numpy as np
import tensorflow as tf

out, seconds = sys.argv[1], float(sys.argv[2])
pause = float(sys.argv[3]) if len(sys.argv) > 3 else 0.05
index = os.environ["TPUCTL_WORKER_INDEX"]

rng = np.random.default_rng(int(index))
x_train = rng.integers(0, 255, size=(6000, 28, 28)).astype(np.float32) / np.float32(255)
y_train = rng.integers(0, 10, size=(6000,)).astype(np.int64)
train_dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(6000).repeat().batch(64)

model = tf.keras.Sequential(
    [
        tf.keras.Input(shape=(28, 28)),
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
    def __init__(self, log):
        super().__init__()
        self.end = time.time() + seconds
        self.log = log

    def on_train_batch_begin(self, batch, logs=None):
        self.log.write(f"{time.time()}\n")

    def on_train_batch_end(self, batch, logs=None):
        if batch == 2:
            with open(os.path.join(out, f".ready-{index}"), "w") as ready:
                ready.write(str(os.getpid()))
            os.replace(os.path.join(out, f".ready-{index}"), os.path.join(out, f"ready-{index}"))
        if os.path.exists(os.path.join(out, "stop")) or time.time() > self.end:
            self.model.stop_training = True
        time.sleep(pause)


with open(os.path.join(out, f"steps-{index}.txt"), "a", buffering=1) as steps:
    model.fit(train_dataset, epochs=1, steps_per_epoch=1_000_000, verbose=0, callbacks=[Until(steps)])
