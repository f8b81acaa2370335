"""An unmodified single-device Keras script, plus one line that saves its final weights."""
import os

import numpy as np
import tensorflow as tf

rng = np.random.default_rng(0)
x = rng.normal(size=(512, 8)).astype("float32")
y = (x.sum(axis=1) > 0).astype("float32")

model = tf.keras.Sequential([tf.keras.Input(shape=(8,)), tf.keras.layers.Dense(8, activation="relu"), tf.keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(64), epochs=2, verbose=0)
print("replicas in sync:", tf.distribute.get_strategy().num_replicas_in_sync, flush=True)

np.save(os.path.join(os.environ["WEIGHTS_OUT"], os.environ.get("TPUCTL_WORKER_INDEX", "0") + ".npy"),
        np.concatenate([w.ravel() for w in model.get_weights()]))
