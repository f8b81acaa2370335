"""A single-device Keras script plus a look at how a global batch is split across replicas."""

import json
import os

import numpy as np
import tensorflow as tf

from tpuctl import runtime

strategy = runtime.strategy()
per_replica = 4
global_batch = runtime.global_batch_size(per_replica)
features = np.random.default_rng(0).normal(size=(256, 4)).astype("float32")
labels = (features.sum(axis=1) > 0).astype("float32")
dataset = tf.data.Dataset.from_tensor_slices((features, labels)).batch(global_batch)

# Unmodified Keras: tpuctl entered strategy.scope(), so the model is mirrored.
model = tf.keras.Sequential([tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(1, activation="sigmoid")])
model.compile(optimizer="sgd", loss="binary_crossentropy")
history = model.fit(dataset, epochs=2, verbose=0)

first = next(iter(strategy.experimental_distribute_dataset(dataset)))[0]
shapes = [int(t.shape[0]) for t in strategy.experimental_local_results(first)]
print(json.dumps({
    "replicas": strategy.num_replicas_in_sync,
    "global_batch": global_batch,
    "per_replica_shapes": shapes,
    "loss_finite": bool(np.isfinite(history.history["loss"][-1])),
    "write_dir": runtime.write_dir(os.environ.get("TPUCTL_MODEL_DIR", "/tmp/m")),
}))
